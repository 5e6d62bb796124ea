"""The vocabulary: one Enum per axis a kernel varies on, with its short name and C tags.

Every other module (specs, templates, runtime) speaks these names; templates use the tags,
never raw strings.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Stage(enum.Enum):
    """A pipeline stage: K1-K4 make the unfused2d_rt plan; K1, K2a and KF the fused2d_rt plan."""

    FILTER = "k1"  # U = G g Gt (+ per-k power-of-two scale)
    PRESCALE = "k2a"  # per-tile max|x| -> tile scale (split prescale only)
    INPUT = "k2"  # V = Bt d B (times the tile scale)
    GEMM = "k3"  # M = V . Ut per (bin, group), from the target's GEMM library
    OUTPUT = "k4"  # y = At M A / (tile scale * filter scale)
    FUSED = "kf"  # fused2d_rt: input transform, tensor-core MMA and output transform in one

    @property
    def short(self) -> str:
        return self.value


class DType(enum.Enum):
    """Storage dtypes. Arithmetic is always fp32."""

    FP16 = "fp16"
    BF16 = "bf16"
    FP32 = "fp32"

    @property
    def short(self) -> str:
        return self.value

    @property
    def itemsize(self) -> int:
        return 4 if self is DType.FP32 else 2

    @property
    def c_storage(self) -> str:
        """The C type a buffer of this dtype is declared with (raw bits for 16-bit types)."""
        return "float" if self is DType.FP32 else "unsigned short"

    @property
    def numpy_name(self) -> str:
        return {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}[self.value]

    @property
    def largest_finite(self) -> float:
        return {"fp16": 65504.0, "bf16": 3.3895313892515355e38, "fp32": 3.4028234663852886e38}[
            self.value
        ]

    @property
    def inf_bits(self) -> int:
        """+Inf's bit pattern: with the sign cleared, every larger pattern is a NaN."""
        return {"fp16": 0x7C00, "bf16": 0x7F80, "fp32": 0x7F800000}[self.value]

    def pow2_bits(self, e: int) -> int:
        """2^e's bit pattern, for e in the dtype's normal range (with the sign cleared, patterns
        compare as the values do)."""
        mantissa = {"fp16": 10, "bf16": 7, "fp32": 23}[self.value]
        bias = (self.inf_bits >> mantissa) >> 1
        if not 1 - bias <= e <= bias:
            raise ValueError(f"2^{e} is not a normal {self.value} value")
        return (e + bias) << mantissa

    @classmethod
    def parse(cls, text: str) -> DType:
        aliases = {
            "half": "fp16",
            "float16": "fp16",
            "bfloat16": "bf16",
            "float": "fp32",
            "float32": "fp32",
        }
        return cls(aliases.get(text, text))


class Target(enum.Enum):
    """Where a kernel runs: the host C target, CUDA (H200, sm_90) or HIP (AMD, compile only)."""

    C = "c"
    CUDA = "cuda"
    HIP = "hip"

    @property
    def short(self) -> str:
        return self.value


class K2Path(enum.Enum):
    """How K2 gathers its input window."""

    REGISTER = "reg"  # each thread loads its alpha x alpha window into registers
    LDS = "lds"  # a workgroup stages a region of overlapping tiles in shared memory
    #: a workgroup stages a row of tiles' windows (all their channels) in shared memory with
    #: 16-byte copies; a thread then transforms one tile from there (its window held, or with
    #: the stream axis one row of bins at a time)
    LDS_ROWS = "ldsrow"

    @property
    def short(self) -> str:
        return self.value


class Prescale(enum.Enum):
    """How the per-tile power-of-two input scale is found."""

    NONE = "none"  # no tile scale (scale 1)
    FUSED = "fused"  # one K2 workgroup reduces the max over the tile's channel lanes
    SPLIT = "split"  # a separate K2a kernel writes the tile scales first

    @property
    def short(self) -> str:
        return self.value


class Activation(enum.Enum):
    """The activation of an epilogue, applied in fp32 after the bias, before y's conversion."""

    NONE = "none"
    RELU = "relu"  # max(v, 0); NaN stays NaN (as torch.relu), -0.0 stays -0.0

    @property
    def short(self) -> str:
        return self.value


class Epilogue(enum.Enum):
    """What K4 or KF applies to each output in fp32 before converting it to the io dtype:
    y = act(conv + bias[k]). The bias is a [K] buffer of the io dtype (docs/RUNTIME.md)."""

    NONE = "none"
    BIAS = "bias"
    RELU = "relu"
    BIAS_RELU = "bias_relu"

    @property
    def short(self) -> str:
        return self.value

    @property
    def tag(self) -> str:
        """The kernel-name suffix ('' for none: epilogue-free kernels keep their names)."""
        return "" if self is Epilogue.NONE else "_e" + self.value.replace("_", "")

    @property
    def bias(self) -> bool:
        return self in (Epilogue.BIAS, Epilogue.BIAS_RELU)

    @property
    def activation(self) -> Activation:
        return Activation.RELU if self in (Epilogue.RELU, Epilogue.BIAS_RELU) else Activation.NONE

    @classmethod
    def of(cls, bias: bool, activation: Activation) -> Epilogue:
        """The epilogue adding a bias (or not) and applying ``activation`` (a table lookup:
        ``wino.conv2d`` asks on every call)."""
        return _EPILOGUE_OF[(bool(bias), activation)]


#: Each epilogue by what it does: (adds a bias, activation) -> the member.
_EPILOGUE_OF = {(e.bias, e.activation): e for e in Epilogue}


@dataclass(frozen=True)
class Tile:
    """An output tile F(mh x mw, 3x3): mh rows, mw columns of outputs per tile."""

    mh: int
    mw: int

    @property
    def name(self) -> str:
        return f"F{self.mh}x{self.mw}"

    @property
    def ah(self) -> int:
        return self.mh + 2

    @property
    def aw(self) -> int:
        return self.mw + 2

    @property
    def bins(self) -> int:
        """A = ah * aw: the number of Winograd-domain bins (batched GEMMs)."""
        return self.ah * self.aw

    @classmethod
    def parse(cls, text: str) -> Tile:
        known = _TILE_NAMES.get(text)
        if known is not None:
            return known
        body = text.upper().removeprefix("F")
        try:
            rows, cols = (int(part) for part in body.split("X"))
        except ValueError:
            raise ValueError(f"tile {text!r}: expected 'F<rows>x<cols>', like F4x4") from None
        tile = cls(rows, cols)
        if tile not in TILES:
            names = ", ".join(t.name for t in TILES)
            raise ValueError(f"tile {text!r} is not one of the supported tiles: {names}")
        return tile

    def __str__(self) -> str:
        return self.name


#: Every supported tile (rows x cols); the order is the order of listings and sweeps.
TILES: tuple[Tile, ...] = tuple(
    Tile(mh, mw)
    for mh, mw in [(2, 2), (4, 4), (6, 6), (6, 4), (4, 6), (6, 2), (2, 6), (4, 2), (2, 4)]
)

#: Each tile by its name (Tile.parse's fast path; other spellings are parsed).
_TILE_NAMES: dict[str, Tile] = {tile.name: tile for tile in TILES}

VECS: tuple[int, ...] = (1, 2, 4, 8)


def coerce(cls: type, value: object, what: str):
    """``value`` as a member of ``cls`` (an Enum above, or Tile): the member itself or its
    string value (DType and Tile also take their aliases, e.g. "float16", "f4x4"). A string
    that names nothing is a ValueError listing the valid values; any other type a TypeError."""
    if isinstance(value, cls):
        return value
    if not isinstance(value, str):
        raise TypeError(
            f"{what}: expected a {cls.__name__} or one of {_valid(cls)}, got "
            f"{type(value).__name__} {value!r}"
        )
    try:
        return cls.parse(value) if hasattr(cls, "parse") else cls(value)
    except ValueError:
        raise ValueError(f"{what}: {value!r} is not one of {_valid(cls)}") from None


def _valid(cls: type) -> list[str]:
    """The valid string values of an Enum above (or Tile), for messages."""
    return [t.name for t in TILES] if cls is Tile else [m.value for m in cls]
