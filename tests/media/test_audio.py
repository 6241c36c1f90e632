"""mrope.Audio, the omni families' audio token counts, and mrope.media.load_audio on real files.

Expected values come from outside mrope: token counts from transformers 5.24's own
``_get_feat_extract_output_lengths`` and ``WhisperFeatureExtractor`` (configured with the released
Qwen2.5-Omni / Qwen3-Omni preprocessor values and called with each processor's padding), sample counts
from what the test itself encodes (tests/support/media.py) or from decoding the file with PyAV.
"""

from __future__ import annotations

import math
import subprocess
import sys

import av
import numpy as np
import pytest
from support import media

import mrope
from mrope import Audio, LayoutError, MediaError, Text, Video, audio_tokens
from mrope._audio_grid import audio_tokens_from_frames
from mrope.media import load_audio, load_video, probe_audio
from mrope.media._audio import has_audio_stream
from mrope.models import get_family

pytestmark = pytest.mark.timeout(120)

Q25 = get_family("qwen2.5-omni").rules
Q3 = get_family("qwen3-omni").rules


# ------------------------------------------------------------------------------------------ segment


def test_audio_segment_takes_exactly_one_length():
    assert (
        Audio(7).tokens == 7 and Audio(seconds=1.5).seconds == 1.5 and Audio(mel_frames=300).mel_frames == 300
    )
    for bad in (
        {},
        {"tokens": 3, "seconds": 1.0},
        {"tokens": 0},
        {"tokens": 2.5},
        {"tokens": True},
        {"seconds": -1.0},
        {"seconds": float("nan")},
        {"mel_frames": 0},
        {"seconds": 1.0, "wrap": "yes"},
    ):
        with pytest.raises(LayoutError):
            Audio(**bad)
    with pytest.raises(LayoutError, match="Audio or None"):
        Video((2, 4, 4), audio=3)


def test_segments_module_is_pure():
    code = "import mrope._segments, sys; assert 'mrope.media' not in sys.modules and 'av' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
    assert not hasattr(mrope.Image, "from_file") and not hasattr(mrope.Video, "from_file")


def test_models_without_audio_refuse_it(tmp_path):
    for seg in (Audio(3), Video((2, 4, 4), audio=Audio(3))):
        with pytest.raises(LayoutError, match="no audio"):
            mrope.build_positions([Text(2), seg], model="qwen2.5-vl")
        with pytest.raises(LayoutError, match="no audio"):
            mrope.count_tokens([Text(2), seg], model="qwen2.5-vl")
    with pytest.raises(LayoutError, match="no audio"):
        load_audio(media.write_audio(tmp_path / "a.wav", 0.5), model="qwen2-vl")
    with pytest.raises(mrope.TokenError, match="no audio"):
        mrope.numpy_rope_index([[1, 2]], model="qwen2.5-vl", audio_seqlens=[100])


# ------------------------------------------------------------------------------------ token counts


def test_token_formulas_equal_transformers():
    from transformers.models.qwen2_5_omni.processing_qwen2_5_omni import (
        _get_feat_extract_output_lengths as q25_len,
    )
    from transformers.models.qwen3_omni_moe.processing_qwen3_omni_moe import (
        _get_feat_extract_output_lengths as q3_len,  # the same formula as modeling_qwen3_omni_moe.py:150
    )

    frames = np.arange(1, 2600)
    ours25 = [audio_tokens_from_frames(int(f), Q25) for f in frames]
    ours3 = [audio_tokens_from_frames(int(f), Q3) for f in frames]
    assert ours25 == q25_len(frames).tolist()
    assert ours3 == q3_len(frames, 50).tolist()
    # hand check: 1 s = 100 frames -> 25 tokens (Qwen2.5-Omni), 13 (Qwen3-Omni)
    assert audio_tokens(Audio(mel_frames=100), Q25) == 25 and audio_tokens(Audio(mel_frames=100), Q3) == 13


def _feature_extractor():
    from transformers import WhisperFeatureExtractor

    # the released preprocessor_config.json of both omni checkpoints (300 s chunks, 128 mel bins)
    return WhisperFeatureExtractor(feature_size=128, chunk_length=300, hop_length=160, sampling_rate=16000)


@pytest.mark.parametrize("seconds", [0.37, 2.0, 7.3419])
def test_seconds_follow_each_processors_feature_extractor(seconds):
    from transformers.models.qwen2_5_omni.processing_qwen2_5_omni import (
        _get_feat_extract_output_lengths as q25_len,
    )
    from transformers.models.qwen3_omni_moe.processing_qwen3_omni_moe import (
        _get_feat_extract_output_lengths as q3_len,
    )

    fe = _feature_extractor()
    wave = np.zeros(round(seconds * 16000), dtype=np.float32)
    # Qwen2.5-Omni's processor pads to max_length (its n_samples); Qwen3-Omni's pads to the longest clip
    mask25 = fe(wave, sampling_rate=16000, padding="max_length", return_attention_mask=True)["attention_mask"]
    mask3 = fe(wave, sampling_rate=16000, padding=True, truncation=False, return_attention_mask=True)[
        "attention_mask"
    ]
    frames25, frames3 = int(np.sum(mask25)), int(np.sum(mask3))
    assert audio_tokens(Audio(seconds=seconds), Q25) == int(q25_len(np.int64(frames25)))
    assert audio_tokens(Audio(seconds=seconds), Q3) == int(q3_len(np.int64(frames3), 50))


def test_qwen25_omni_caps_audio_at_300_seconds():
    # the processor truncates to n_samples = 300 s: 30000 frames -> ((29999 // 2 + 1 - 2) // 2 + 1) tokens
    assert audio_tokens(Audio(seconds=400.0), Q25) == ((30000 - 1) // 2 + 1 - 2) // 2 + 1 == 7500
    assert audio_tokens(Audio(seconds=400.0), Q3) == 400 * 13  # no cap: 13 per full second


def test_too_short_a_clip_is_an_error():
    with pytest.raises(LayoutError, match="at least one token"):
        mrope.build_positions([Audio(mel_frames=1)], model="qwen2.5-omni")  # 0 tokens


# ----------------------------------------------------------------------------------------- files


def _mel(samples_16k: int, rules) -> int:
    # written out independently: the processors' mask sum (ceil for Qwen2.5-Omni, floor for Qwen3-Omni)
    return math.ceil(samples_16k / 160) if rules is Q25 else samples_16k // 160


@pytest.mark.parametrize(
    "suffix,rate,seconds",
    [(".wav", 16000, 1.234), (".wav", 44100, 2.5), (".mp4", 44100, 2.5), (".m4a", 16000, 1.3)],
)
def test_load_audio_reads_the_container(tmp_path, suffix, rate, seconds):
    path = media.write_audio(tmp_path / f"a{suffix}", seconds, rate)
    written = int(seconds * rate)
    info = probe_audio(path)
    assert (info.sample_rate, info.num_samples, info.timing) == (rate, written, "stream")
    # librosa.load(sr=16000) resamples to ceil(n * 16000 / sr) samples
    at16k = written if rate == 16000 else math.ceil(written * (16000 / rate))
    for model, rules in (("qwen2.5-omni", Q25), ("qwen3-omni", Q3)):
        a = load_audio(path, model=model)
        assert a == Audio(mel_frames=_mel(at16k, rules))
    assert load_audio(path.read_bytes(), model="qwen3-omni") == load_audio(path, model="qwen3-omni")


def test_load_audio_matroska_uses_packet_times(tmp_path):
    path = media.write_audio(tmp_path / "a.mkv", 1.7, 22050)
    info = probe_audio(path)
    assert info.timing == "packets" and info.sample_rate == 22050
    with av.open(str(path)) as c:  # what a decoder (and librosa) gets
        decoded = sum(f.samples for f in c.decode(c.streams.audio[0]))
    assert abs(info.num_samples - decoded) <= 22050 // 1000 + 1  # Matroska stamps are milliseconds
    frames = load_audio(path, model="qwen3-omni").mel_frames
    assert abs(frames - math.ceil(decoded * 16000 / 22050) // 160) <= 1


def test_load_video_attaches_its_audio(tmp_path):
    mp4 = media.write_video_with_audio(tmp_path / "v.mp4", 24, 12, audio_seconds=1.9, rate=44100)
    silent = media.write_video(tmp_path / "s.mp4", 24, 12)
    assert has_audio_stream(mp4) and not has_audio_stream(silent)
    v = load_video(mp4, model="qwen2.5-omni", use_audio_in_video=True)
    at16k = math.ceil(int(1.9 * 44100) * (16000 / 44100))
    assert v.audio == Audio(mel_frames=math.ceil(at16k / 160))
    assert load_video(mp4, model="qwen2.5-omni").audio is None
    assert load_video(silent, model="qwen2.5-omni", use_audio_in_video=True).audio is None
    with pytest.raises(LayoutError, match="no audio"):
        load_video(mp4, model="qwen2.5-vl", use_audio_in_video=True)
    p = mrope.build_positions([Text(3), v, Text(2)], model="qwen2.5-omni")
    assert p.audio_tokens.tolist() == [audio_tokens(v.audio, Q25)]
    assert np.count_nonzero(p.input_ids == Q25.audio_pad_id) == p.audio_tokens[0]


def test_detect_media_kind_tells_audio(tmp_path):
    from mrope.media import detect_media_kind

    assert detect_media_kind(media.write_audio(tmp_path / "a.wav", 0.3).read_bytes()) == "audio"
    assert detect_media_kind(media.write_audio(tmp_path / "a.m4a", 0.3).read_bytes()) == "audio"
    both = media.write_video_with_audio(tmp_path / "v.mp4", 6, 12, audio_seconds=0.5).read_bytes()
    assert detect_media_kind(both) == "video"


def test_load_audio_bad_input(tmp_path):
    with pytest.raises(MediaError, match="no audio stream"):
        load_audio(media.write_video(tmp_path / "s.mp4", 6, 12), model="qwen2.5-omni")
    for bad in (
        b"",
        media.random_bytes(2048),
        media.truncated(media.write_audio(tmp_path / "t.mp4", 1.0).read_bytes(), 40),
    ):
        with pytest.raises(MediaError):
            load_audio(bad, model="qwen2.5-omni")
    with pytest.raises(MediaError, match="max_packets"):
        probe_audio(media.write_audio(tmp_path / "x.wav", 0.1), max_packets=0)


def test_cli_probe_reports_audio(tmp_path, capsys):
    import json

    from mrope._cli import main

    wav = media.write_audio(tmp_path / "a.wav", 1.3, 44100)
    assert main(["probe", str(wav), "--model", "qwen3-omni", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    at16k = math.ceil(int(1.3 * 44100) * (16000 / 44100))
    assert doc["audio"]["num_samples"] == int(1.3 * 44100) and doc["audio"]["mel_frames"] == at16k // 160
    assert doc["audio"]["audio_tokens"] == audio_tokens(Audio(mel_frames=at16k // 160), Q3)
    clip = media.write_video_with_audio(tmp_path / "v.mkv", 24, 12, audio_seconds=1.9)
    assert main(["probe", str(clip), "--model", "qwen2.5-omni", "--fps", "2"]) == 0
    out = capsys.readouterr().out
    assert "audio: aac, 44100 Hz" in out and "audio tokens for qwen2.5-omni" in out
    assert main(["probe", str(clip), "--model", "qwen2.5-vl", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["audio"]["sample_rate"] == 44100 and "audio_tokens" not in doc["audio"]


def test_public_audio_tokens():
    assert mrope.audio_tokens(Audio(seconds=2.0), model="qwen2.5-omni") == 50  # 200 frames
    assert mrope.audio_tokens(Audio(seconds=2.0), "Qwen/Qwen3-Omni-30B-A3B-Instruct") == 26  # 2 x 13
    assert mrope.audio_tokens(Audio(9), model="qwen3-omni") == 9
    with pytest.raises(LayoutError, match="no audio"):
        mrope.audio_tokens(Audio(9), model="qwen2-vl")


def test_cli_positions_shows_fractional_time(tmp_path, capsys):
    import json

    from mrope._cli import main

    spec = tmp_path / "s.json"
    spec.write_text(
        json.dumps(
            {
                "model": "qwen3-omni",
                "segments": [
                    {"type": "text", "tokens": 2},
                    {"type": "video", "grid": [3, 4, 4], "second_per_grid": 0.9, "audio": {"seconds": 1.5}},
                    {"type": "audio", "mel_frames": 120},
                ],
            }
        )
    )
    assert main(["positions", "--spec", str(spec), "--out", str(tmp_path / "p.npy")]) == 0
    assert "float32 [3, 56]" in capsys.readouterr().out
    assert np.load(tmp_path / "p.npy").dtype == np.float32
    assert main(["positions", "--spec", str(spec)]) == 0
    out = capsys.readouterr().out
    assert "15.7" in out and "27.4" in out and "delta -7.6" in out  # 4 + 0.9 * 13, 4 + 1.8 * 13
