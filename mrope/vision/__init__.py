"""Deprecated alias of :mod:`mrope.media` (the package reads every kind of media, so it was renamed).

``import mrope.vision`` warns and yields :mod:`mrope.media` itself, so ``mrope.vision is mrope.media``
and a patch on either applies to both. The old submodule paths (``mrope.vision.video``, ...) are the
stubs beside this file; they are loaded here, while ``mrope.vision`` is still this package, so that each
resolves to its :mod:`mrope.media` module object (once ``mrope.vision`` is :mod:`mrope.media`, Python
would look for them in ``mrope/media/`` and load second copies). The package's warning stands for them.
"""

import warnings

from mrope import media as _new
from mrope._deprecated import alias_module

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from mrope.vision import audio, detect, image, resize, sampling, tiling, video  # noqa: F401

alias_module(__name__, _new)
