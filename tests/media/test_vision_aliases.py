"""mrope.vision, renamed mrope.media: the old package and submodule paths warn and give the same objects."""

import importlib
import sys

import pytest

import mrope
import mrope.media
import mrope.media.sampling
import mrope.media.video


def _forget_vision(monkeypatch):
    """Drop the alias modules so the next import runs the stubs again (restored after the test)."""
    for name in [n for n in sys.modules if n == "mrope.vision" or n.startswith("mrope.vision.")]:
        monkeypatch.delitem(sys.modules, name)
    if "vision" in vars(mrope):  # not hasattr: mrope.__getattr__ would import the alias
        monkeypatch.delattr(mrope, "vision")


def test_vision_package_warns_and_is_media(monkeypatch):
    _forget_vision(monkeypatch)
    with pytest.warns(DeprecationWarning, match=r"mrope\.vision has moved to mrope\.media"):
        old = importlib.import_module("mrope.vision")
    assert old is mrope.media
    assert mrope.vision is mrope.media
    from mrope.vision import VideoInfo, load_video

    assert VideoInfo is mrope.media.VideoInfo and load_video is mrope.media.load_video


def test_vision_submodule_warns_and_is_media_module(monkeypatch):
    _forget_vision(monkeypatch)
    with pytest.warns(DeprecationWarning, match=r"mrope\.vision has moved to mrope\.media"):
        old = importlib.import_module("mrope.vision.sampling")
    assert old is mrope.media.sampling
    assert sys.modules["mrope.vision.video"] is mrope.media.video
    monkeypatch.setattr("mrope.vision.video.DEFAULT_MAX_PACKETS", 7)
    assert mrope.media.video.DEFAULT_MAX_PACKETS == 7
