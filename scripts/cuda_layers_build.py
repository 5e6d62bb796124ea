"""Build with nvcc (no GPU needed) the cuda kernels of the default picks of ResNet-50's and
VGG-16's 3x3 stride-1 layers (fp16, batch 32, plain and with the bias epilogue) and of
`wino bench --overhead`'s case, into a folder to carry to a GPU machine instead of a full build
(15 kernels, 2.4 MB, about 20 s here):
    python3 scripts/cuda_layers_build.py [FOLDER]   # default build-layers/
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests import cuda_cache
from wino.pick import default_stage_specs
from wino.problem import Problem
from wino.refusals import Refused
from wino.runtime.plan import default_tile
from wino.vocab import Epilogue, Target

LAYERS = [
    (64, 56, 64),
    (128, 28, 128),
    (256, 14, 256),
    (512, 7, 512),
    (3, 224, 64),
    (64, 224, 64),
    (64, 112, 128),
    (128, 112, 128),
    (128, 56, 256),
    (256, 56, 256),
    (256, 28, 512),
    (512, 28, 512),
    (512, 14, 512),
]
specs = set()
for c, hw, k in LAYERS:
    for n in (32,):
        p = Problem(N=n, C=c, H=hw, W=hw, K=k, pad_h=1, pad_w=1, dtype="fp16")
        tile = default_tile(p)
        specs.update(default_stage_specs(p, tile, target=Target.CUDA).values())
        try:
            specs.update(
                default_stage_specs(p, tile, target=Target.CUDA, epilogue=Epilogue.BIAS).values()
            )
        except (Refused, KeyError, ValueError) as err:
            print("no bias epilogue:", p.label(), err)
p = Problem(N=1, C=64, H=8, W=8, K=64, pad_h=1, pad_w=1, dtype="fp16")
specs.update(default_stage_specs(p, default_tile(p), target=Target.CUDA).values())
print(len(specs), "specs")
root = (
    Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "build-layers"
)
cuda_cache.build(specs, root, jobs=2)
print("built")
