"""An encoding a dataset's videos can be re-encoded to, and the FFmpeg arguments that make it."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..decode.codecs import CODECS, Encoded
from ..errors import UserError

PIXEL_FORMATS = ("yuv420p", "yuv444p", "yuv420p10le")


@dataclass(frozen=True)
class Encoding(Encoded):
    """codec h264 | hevc | av1; gop: frames between keyframes (at most); crf: quality (lower: better, larger);
    preset: the encoder's speed preset (its own default where None); height/width: a smaller size (both or
    neither); faststart: the index (moov) ahead of the frames, so a reader needs one request less; fast_decode:
    the encoder's tools that cost the decoder most left out (x264/x265 `-tune fastdecode`: no CABAC, no deblocking;
    SVT-AV1 `fast-decode=1`), for more bytes at the same crf."""

    codec: str
    gop: int | None = None
    crf: int | None = None
    preset: str | None = None
    pixel_format: str = "yuv420p"
    height: int | None = None
    width: int | None = None
    faststart: bool = True
    fast_decode: bool = False

    def __post_init__(self):
        if self.codec not in CODECS:
            raise UserError(f"codec {self.codec!r} is unknown; choose one of {sorted(CODECS)}")
        if self.gop is not None and self.gop < 1:
            raise UserError(f"gop {self.gop}: give 1 (every frame a keyframe) or more")
        if self.crf is not None and not 0 <= self.crf <= 63:
            raise UserError(f"crf {self.crf}: give 0 to 63 (51 for h264 and hevc)")
        if self.pixel_format not in PIXEL_FORMATS:
            raise UserError(f"pixel_format {self.pixel_format!r}: choose one of {list(PIXEL_FORMATS)}")
        if (self.height is None) != (self.width is None):
            raise UserError("height and width: give both (a smaller size) or neither (the source's)")
        if self.height is not None and (self.height < 16 or self.width < 16 or self.height % 2 or self.width % 2):
            raise UserError(f"height x width {self.height}x{self.width}: give even sizes of at least 16")

    def to_dict(self) -> dict:
        return asdict(self)

    def label(self) -> str:
        """A short name for tables and plots: `h264 g10 crf23`."""
        size = f" {self.width}x{self.height}" if self.height else ""
        fast = " fastdecode" if self.fast_decode else ""
        return f"{self.codec} g{self.effective_gop} crf{self.effective_crf}{size}{fast}"

    def ffmpeg_args(self, timescale: int, threads: int) -> list[str]:
        """The output options of an `ffmpeg -i SOURCE ... OUT.mp4` that re-encodes the first video stream: every
        frame kept at its timestamp (passthrough, the source's track timescale), no audio or other streams."""
        args = ["-map", "0:v:0", "-an", "-sn", "-dn", "-c:v", self.encoder, "-threads", str(threads)]
        args += ["-g", str(self.effective_gop), "-crf", str(self.effective_crf), "-pix_fmt", self.pixel_format]
        if self.effective_preset is not None:
            args += ["-preset", str(self.effective_preset)]
        if self.codec == "hevc":  # closed GOPs: a keyframe's neighbours need nothing before it (random access)
            pools = f":pools={threads}" if threads else ""  # 0: FFmpeg's and x265's own choice, every core
            args += ["-x265-params", f"log-level=error:no-open-gop=1{pools}"]
        if self.codec == "h264":
            args += ["-x264-params", "open-gop=0"]
        if self.fast_decode:
            args += ["-svtav1-params", "fast-decode=1"] if self.codec == "av1" else ["-tune", "fastdecode"]
        if self.height is not None:
            args += ["-vf", f"scale={self.width}:{self.height}:flags=area"]
        args += ["-fps_mode", "passthrough", "-video_track_timescale", str(timescale)]
        if self.faststart:
            args += ["-movflags", "+faststart"]
        return args


def from_config(values: dict, where: str) -> tuple[str, Encoding]:
    """(the source dataset's name, the encoding) from a `reencode:` mapping; errors name `where`."""
    values = dict(values)
    source = values.pop("from", None)
    try:
        return source, Encoding(**values)
    except UserError as e:
        raise UserError(f"{where}: {e}") from None
