"""The tier's CPU stand-in for SGLang's sgl_kernel (tests/real_engines/sglang_cpu), in
the SGLang venv where it serves: its two ops do what SGLang's Triton kernels do, the
speculative ones refuse, and the host-clock event times a DeviceTimer interval.

Needs no engine: seconds, in the SGLang venv's own torch."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.real_engines import sglang_python

pytestmark = pytest.mark.real_engine

CHECKS = r'''
import time
import torch
import sgl_kernel

# Three requests in rows 2, 0 and 3 of req_to_token; their new slots lie back to back
# in out_cache_loc (2, 0 and 3 slots), from columns 5, 0 and 1.
req_to_token = torch.zeros((4, 8), dtype=torch.int32)
out_cache_loc = torch.tensor([11, 12, 21, 22, 23], dtype=torch.int64)
sgl_kernel.assign_req_to_token_pool_cpu(
    torch.tensor([2, 0, 3]), req_to_token, torch.tensor([5, 0, 1]), torch.tensor([7, 0, 4]),
    out_cache_loc, req_to_token.shape[1])
expected = torch.zeros((4, 8), dtype=torch.int32)
expected[2, 5:7] = torch.tensor([11, 12])
expected[3, 1:4] = torch.tensor([21, 22, 23])
assert torch.equal(req_to_token, expected), req_to_token

# Two layers' K buffers of 6 rows, bf16, 4 wide (8 bytes a row): rows 1 and 4 over 0 and 5.
k0 = torch.arange(24, dtype=torch.bfloat16).view(6, 4)
k1 = -torch.arange(24, dtype=torch.bfloat16).view(6, 4)
before = k0.clone(), k1.clone()
sgl_kernel.copy_all_layer_kv_cache_cpu(
    torch.tensor([k0.data_ptr(), k1.data_ptr()], dtype=torch.uint64),
    torch.tensor([8, 8]), torch.tensor([0, 5]), torch.tensor([1, 4]))
for buffer, old in zip((k0, k1), before):
    assert torch.equal(buffer[0], old[1]) and torch.equal(buffer[5], old[4])
    assert torch.equal(buffer[1:5], old[1:5])

try:
    sgl_kernel.verify_tree_greedy_cpu()
except NotImplementedError as exc:
    assert "speculative" in str(exc)
else:
    raise AssertionError("a speculative op ran")
assert not hasattr(torch.ops.sgl_kernel, "convert_weight_packed")  # the AMX paths stay off

from sglang.srt.utils.device_timer import DeviceTimer
seen = []
timer = DeviceTimer(lambda t, **meta: seen.append((t, meta)))
with timer.wrap({"category": "forward"}):
    time.sleep(0.05)
(seconds, meta), = seen
assert 0.04 < seconds < 5 and meta == {"category": "forward"}, seen
print("ok")
'''


def test_the_cpu_stand_in_does_what_sglangs_kernels_do() -> None:
    done = subprocess.run([str(sglang_python()), "-c", CHECKS], capture_output=True, text=True,
                          timeout=300, env={"SGLANG_USE_CPU_ENGINE": "1", "PATH": "/usr/bin"})
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr
