"""LeRobot on-disk formats (v2.1 and v3.0): `paths` (path templates) and `meta` (metadata readers and writers).

Import the submodule you need: `meta` brings numpy and pyarrow (~0.13 s), which `paths` and the CLI's parser do not.
"""
