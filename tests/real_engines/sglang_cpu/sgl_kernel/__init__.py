"""A CPU stand-in for SGLang's `sgl_kernel`, for the real-engine tier's SGLang only.

SGLang 0.5.23 on the CPU (SGLANG_USE_CPU_ENGINE=1) imports a few glue ops from
`sgl_kernel` at module level. Its CPU build of `sgl_kernel` is compiled from SGLang's
source tree for AMX Xeons and PyPI has only CUDA wheels, so this module serves them in
torch instead. `torch.ops.sgl_kernel` stays empty: SGLang's AMX paths test for
`torch.ops.sgl_kernel.convert_weight_packed` and, without it, run their torch code.

It also puts a host-clock timing event in place of `torch.cpu.Event` (host_event.py):
every SGLang process on the CPU imports this module before its first forward pass.

tests/real_engines/install.sh puts this directory on the SGLang venv's path with a
.pth file. Nothing here is SGLang's code.
"""

from __future__ import annotations

import ctypes

import torch

from sgl_kernel import host_event

host_event.install()


def assign_req_to_token_pool_cpu(req_pool_indices: torch.Tensor, req_to_token: torch.Tensor,
                                 start_offset: torch.Tensor, end_offset: torch.Tensor,
                                 out_cache_loc: torch.Tensor, pool_len: int) -> None:
    """For request i, write its next end_offset[i] - start_offset[i] cache slots of
    out_cache_loc (the requests' slots lie back to back there) into row
    req_pool_indices[i] of req_to_token, from column start_offset[i]
    (sglang/srt/mem_cache/allocation.py assign_req_to_token_pool_func, whose Triton
    kernel does the same)."""
    del pool_len  # the row length: req_to_token's second dimension here
    taken = 0
    for row, start, end in zip(req_pool_indices.tolist(), start_offset.tolist(),
                               end_offset.tolist(), strict=True):
        count = end - start
        req_to_token[row, start:end] = out_cache_loc[taken:taken + count].to(req_to_token.dtype)
        taken += count


def copy_all_layer_kv_cache_cpu(data_ptrs: torch.Tensor, strides: torch.Tensor,
                                tgt_loc: torch.Tensor, src_loc: torch.Tensor) -> None:
    """In every buffer j (each layer's K and V), copy row src_loc[i] over row
    tgt_loc[i], a row being strides[j] bytes from address data_ptrs[j]
    (sglang/kernels/ops/kvcache/cache_move.py copy_all_layer_kv_cache_func)."""
    if src_loc.numel() == 0:
        return
    sources, targets = src_loc.long(), tgt_loc.long()
    rows = int(max(sources.max().item(), targets.max().item())) + 1
    for address, stride in zip(data_ptrs.tolist(), strides.tolist(), strict=True):
        raw = (ctypes.c_uint8 * (rows * stride)).from_address(address)
        buffer = torch.frombuffer(raw, dtype=torch.uint8).view(rows, stride)
        buffer[targets] = buffer[sources]  # gathers every source row first


def _speculative_only(name: str):
    def refuse(*args: object, **kwargs: object) -> None:
        raise NotImplementedError(
            f"sgl_kernel.{name}: speculative decoding has no CPU kernel in the rig's "
            "test tier (tests/real_engines/sglang_cpu)")
    refuse.__name__ = name
    return refuse


# Imported at start-up by sglang/kernels/ops/speculative/*.py, called only with
# speculative decoding, which the tier's CPU SGLang therefore does not have.
assign_draft_cache_locs_contiguous_cpu = _speculative_only("assign_draft_cache_locs_contiguous_cpu")
assign_extend_cache_locs_cpu = _speculative_only("assign_extend_cache_locs_cpu")
build_tree_kernel_efficient_cpu = _speculative_only("build_tree_kernel_efficient_cpu")
fill_accept_out_cache_loc_cpu = _speculative_only("fill_accept_out_cache_loc_cpu")
fill_bonus_tokens_cpu = _speculative_only("fill_bonus_tokens_cpu")
rotate_input_ids_cpu = _speculative_only("rotate_input_ids_cpu")
verify_tree_greedy_cpu = _speculative_only("verify_tree_greedy_cpu")
