#!/usr/bin/env bash
# Install the system packages dlbench needs (FFmpeg's shared libraries, for torchcodec).
# Uses apt-get when it can (as root, or with password-less sudo); otherwise says what is missing and stops.
set -euo pipefail

have_ffmpeg() {
  command -v ffmpeg >/dev/null 2>&1 && ldconfig -p 2>/dev/null | grep -q 'libavcodec\.so'
}

if have_ffmpeg; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; fi
fi
if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" = 0 ] || [ -n "$SUDO" ]; }; then
  echo "installing FFmpeg with apt-get ..."
  $SUDO apt-get update -qq || true
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq ffmpeg >/dev/null
  # without apt-utils, dpkg's triggers may leave the linker cache stale: refresh it before looking
  $SUDO ldconfig || true
  have_ffmpeg && exit 0
fi
cat >&2 <<'MSG'
dlbench needs FFmpeg (its shared libraries libavcodec/libavformat, versions 4 to 7) for torchcodec,
and could not install it here. Install it, then rerun:
  Debian/Ubuntu:  sudo apt-get install ffmpeg
  Fedora/RHEL:    sudo dnf install ffmpeg-free
  conda:          conda install -c conda-forge "ffmpeg<8"
MSG
exit 1
