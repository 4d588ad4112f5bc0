"""The codecs dlbench writes (synthetic datasets, re-encodings) and what reading them needs, written once."""

from __future__ import annotations

from typing import NamedTuple


class Codec(NamedTuple):
    encoder: str  # the FFmpeg encoder
    name: str  # the codec name info.json records
    crf: int  # default quality
    gop: int  # default frames between keyframes (at most)
    preset: str | int | None  # default encoder preset; None: the encoder's own


# codec name in config -> its encoder and defaults
CODECS = {
    "h264": Codec("libx264", "h264", 23, 30, None),
    "hevc": Codec("libx265", "hevc", 28, 30, None),
    # LeRobot 0.6.1's recording defaults: libsvtav1, g=2, crf=30, preset 12
    "av1": Codec("libsvtav1", "av1", 30, 2, 12),
}

# codecs whose files torchcodec's approximate seek misplaces: x265's open GOPs (its default) land it 2 frames late
# (torchcodec 0.13, FFmpeg 5.1; exact mode, which indexes every packet at open, is right)
EXACT_SEEK_CODECS = frozenset({"hevc"})


class Encoded:
    """The effective encoder settings of a dataclass that holds `codec`, `gop`, `crf` and `preset` (None: the
    codec's default): a synthetic dataset's (`synth.spec.SynthConfig`) or a re-encoding's (`encoding.options`)."""

    codec: str
    gop: int | None
    crf: int | None
    preset: str | int | None

    @property
    def encoder(self) -> str:
        return CODECS[self.codec].encoder

    @property
    def effective_gop(self) -> int:
        return self.gop if self.gop is not None else CODECS[self.codec].gop

    @property
    def effective_crf(self) -> int:
        return self.crf if self.crf is not None else CODECS[self.codec].crf

    @property
    def effective_preset(self) -> str | int | None:
        return self.preset if self.preset is not None else CODECS[self.codec].preset
