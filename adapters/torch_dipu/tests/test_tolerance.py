"""The tolerance policy's helper (adapters/dipu_tolerance.py,
docs/tolerance.md): it passes the same sums taken in another order on dipu
and on the CPU, and fails wrong results (a scale of 1.001, a missing term,
an index off by one) at the policy's tolerance; its table is the Rust
helper's (dipu_diopi::tolerance)."""

import os
import re

import numpy as np
import pytest
import torch
from dipu_tolerance import (
    BASE,
    EXACT,
    assert_close,
    assert_equal,
    assert_trained_close,
    close_report,
    tolerance,
)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
K = 512


@pytest.fixture(scope="module")
def operands():
    g = torch.Generator().manual_seed(0)
    return torch.rand(64, K, generator=g) * 2 - 1, torch.rand(K, 24, generator=g) * 2 - 1


def test_other_orders_of_the_same_sums_pass(operands):
    a, b = operands
    got = (a.to("dipu") @ b.to("dipu")).cpu()
    backwards = a.flip(1) @ b.flip(0)
    wide = (a.double() @ b.double()).float()
    assert not torch.equal(got, backwards) or not torch.equal(got, wide), \
        "no order rounds differently: the test shows nothing"
    for reference in (a @ b, backwards, wide):
        assert_close(got, reference, reduction_len=K)
    x = torch.rand(8, 4096, generator=torch.Generator().manual_seed(1)) - 0.5
    assert_close(x.to("dipu").sum(1).cpu(), x.flip(1).double().sum(1).float(), reduction_len=4096)


def test_wrong_results_fail(operands):
    a, b = operands
    da, db = a.to("dipu"), b.to("dipu")
    want = a @ b
    wrong = {
        "scaled by 1.001": (da @ db) * 1.001,
        "a term missing": da[:, :-1] @ db[:-1],
        "a column off by one": (da @ db).roll(1, dims=1),
        "a row off by one": da[1:] @ db,
    }
    for what, got in wrong.items():
        got = got.cpu()
        if got.shape != want.shape:
            got = torch.cat([got, want[-1:]])  # the last row right, every other one its neighbour's
        with pytest.raises(AssertionError, match="elements differ"):
            assert_close(got, want, reduction_len=K, msg=what)
    # A sum missing one of its 4096 terms (each about 0.25 in size).
    x = torch.rand(8, 4096, generator=torch.Generator().manual_seed(1)) - 0.5
    with pytest.raises(AssertionError, match="elements differ"):
        assert_close(x[:, 1:].to("dipu").sum(1).cpu(), x.sum(1), reduction_len=4096)


def test_a_wrong_training_update_fails():
    p0 = torch.rand(32, generator=torch.Generator().manual_seed(2)) * 0.1
    update = torch.rand(32, generator=torch.Generator().manual_seed(3)) * 1e-4
    trained = p0 - update
    assert_trained_close(trained.clone(), trained, p0, reduction_len=1000)
    for what, got in {"no step": p0, "twice the step": p0 - 2 * update, "a tenth more": p0 - 1.1 * update}.items():
        with pytest.raises(AssertionError, match="elements differ"):
            assert_trained_close(got, trained, p0, reduction_len=1000, msg=what)


def test_the_message_names_the_worst_element_and_its_bound():
    want = np.linspace(-1, 1, 27, dtype=np.float32).reshape(9, 3)
    got = want.copy()
    got[4, 1] += 1.34e-5
    got[7, 2] += 2e-5
    why = close_report(got, want)
    assert why.startswith("2 of 27 elements differ (float32, reduction_len 1"), why
    assert "worst at index (7, 2)" in why and "bound 1.1" in why, why
    assert close_report(got, want, reduction_len=9) is None  # a 9-term sum may move that far
    with pytest.raises(AssertionError, match=r"^grad: 2 of 27"):
        assert_close(got, want, msg="grad")


def test_special_values_integers_and_structure():
    nan_inf = np.array([np.nan, 1.0, np.inf, -np.inf], dtype=np.float32)
    assert close_report(nan_inf, nan_inf.copy()) is None
    assert close_report(nan_inf, nan_inf[[0, 1, 3, 2]]) is not None  # inf is not -inf
    assert close_report(np.array([np.nan], np.float32), np.array([1.0], np.float32)) is not None
    assert close_report(np.array([1, 2], np.int64), np.array([1, 3], np.int64)) is not None
    big = np.array([2**60], np.int64)
    assert close_report(big, big + 1) is not None, "integers are compared exactly, not as floats"
    assert close_report(np.array([True]), np.array([False])) is not None
    assert close_report(torch.ones(2), torch.ones(3)).startswith("shape")
    assert close_report(torch.ones(2), torch.ones(2, dtype=torch.float64)).startswith("dtype")
    assert close_report((torch.ones(2), torch.arange(2)), (torch.ones(2), torch.arange(2))) is None
    assert close_report([torch.ones(2)], [torch.ones(2), None]).startswith("structure")
    bf = torch.tensor([1.0, 2.0], dtype=torch.bfloat16)
    assert close_report(bf, bf * 1.01) is None and close_report(bf, bf * 1.1) is not None
    assert tolerance("int32", 100) == (0.0, 0.0) and tolerance(torch.float32) == (1e-5, 1.3e-6)
    with pytest.raises(ValueError):
        tolerance("float8", 1)


def test_bitwise_is_bitwise():
    z = torch.zeros(3)
    assert_equal(z.clone(), z)
    assert close_report(-z, z) is None, "-0.0 == 0.0 under a tolerance"
    with pytest.raises(AssertionError, match="bitwise"):
        assert_equal(-z, z)
    one_ulp = torch.nextafter(torch.ones(1), torch.full((1,), 2.0))
    with pytest.raises(AssertionError, match="bitwise"):
        assert_equal(one_ulp, torch.ones(1))


def test_the_table_is_the_rust_helpers():
    """dipu_diopi::tolerance (diopi/src/tolerance.rs) holds the same table."""
    with open(os.path.join(REPO, "diopi", "src", "tolerance.rs")) as f:
        src = f.read()
    rows = re.findall(r'\("(\w+)", ([0-9.e-]+), ([0-9.e-]+)\),', src.split("pub const EXACT")[0])
    assert {name: (float(a), float(r)) for name, a, r in rows} == BASE
    exact = re.search(r"pub const EXACT: \[&str; \d+\] = \[([^\]]*)\]", src).group(1)
    assert set(re.findall(r'"(\w+)"', exact)) == EXACT
