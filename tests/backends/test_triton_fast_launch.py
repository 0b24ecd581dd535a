"""backends/triton/fast_launch.py: which calls reuse a kept compiled kernel, and the argument
list it is launched with (a stand-in kernel records the launches; the GPU benchmark
``bench_gpu_api.py --only fastlaunch`` compares the real launches' bits)."""

from __future__ import annotations

import inspect

import pytest

torch = pytest.importorskip("torch")

from fp4spec.backends.triton import fast_launch as fl  # noqa: E402


class Param:
    def __init__(self, name, const=False, default=inspect.Parameter.empty):
        self.name, self.is_constexpr, self.default = name, const, default


class Kernel:
    """Records bound launches (Triton's path) and returns a compiled stand-in that records
    direct launches."""

    __name__ = "stand_in_kernel"

    def __init__(self):
        self.params = [Param("x_ptr"), Param("n"), Param("scale"), Param("BLOCK", True), Param("FLAG", True, False)]
        self.bound, self.direct = [], []

    def __getitem__(self, grid):
        def bound(*args, **kw):
            self.bound.append((grid, args, kw))
            return Compiled(self)
        return bound


class Compiled:
    def __init__(self, kernel):
        self.kernel = kernel

    def __getitem__(self, grid):
        return lambda *args: self.kernel.direct.append((grid, args))


@pytest.fixture
def on(monkeypatch):
    monkeypatch.setattr(fl, "interpret", lambda: False)
    fl.enable(True)
    yield
    fl.enable(False)


def test_off_by_default_is_the_plain_launch(monkeypatch):
    fl.enable(False)
    k = Kernel()
    x = torch.zeros(8)
    fl.run(k, (2,), x, 16, 1.0, BLOCK=4)
    fl.run(k, (2,), x, 16, 1.0, BLOCK=4)
    assert len(k.bound) == 2 and not k.direct


def test_a_warm_key_launches_every_parameter_in_order(on):
    k = Kernel()
    x = torch.zeros(64)
    fl.run(k, (2,), x, 16, 1.0, BLOCK=4, num_warps=4)
    fl.run(k, (3,), x, 32, 2.5, BLOCK=4, num_warps=4)   # same specialization: a hit
    assert len(k.bound) == 1
    assert k.direct == [((3, 1, 1), (x, 32, 2.5, 4, False))]  # three grid sizes; the default of FLAG filled in


@pytest.mark.parametrize("change", ["constexpr", "option", "int is 1", "int not a multiple of 16", "int64",
                                    "dtype", "alignment"])
def test_what_triton_specializes_on_is_a_new_key(on, change):
    k = Kernel()
    x = torch.zeros(64)
    args, kw = [x, 16, 1.0], dict(BLOCK=4, num_warps=4)
    fl.run(k, (1,), *args, **kw)
    if change == "constexpr":
        kw["BLOCK"] = 8
    elif change == "option":
        kw["num_warps"] = 8
    elif change == "int is 1":
        args[1] = 1
    elif change == "int not a multiple of 16":
        args[1] = 17
    elif change == "int64":
        args[1] = 1 << 40
    elif change == "dtype":
        args[0] = torch.zeros(64, dtype=torch.float16)
    else:
        args[0] = x[1:]  # 4 bytes past a 16-byte boundary
    fl.run(k, (1,), *args, **kw)
    assert len(k.bound) == 2 and not k.direct


def test_missing_argument_is_named(on):
    with pytest.raises(TypeError, match="BLOCK: missing argument of kernel stand_in_kernel"):
        fl.run(Kernel(), (1,), torch.zeros(4), 16, 1.0)
