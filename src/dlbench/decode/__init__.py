"""Decoding video: the decoder cache (`cache`: torchcodec decoders by file and reader, on the CPU or NVDEC), the byte
sources decoders read remote files through (`source`), the fetchers that bring those bytes ahead (`fetch`: an
episode's video per request; `batch_fetch`: a map-style batch's frames), and `decoder.FrameDecoder`, the one object
a loader process decodes with. The codecs dlbench knows are `codecs.CODECS`."""
