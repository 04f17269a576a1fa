"""Lab 6's mutants: one realistic slip per TODO (at least), and the check that must catch it.

schedules.py's `_send` and the checker's SleepStage are left unmutated: they are being reshaped for GPUs.
two_d.py (FSDP2 x TP on 4 ranks) is optional and not graded, so it has no mutant.
"""
from . import Mutant

_TPL, _TP, _DT = "tp_layers.py", "tensor_parallel.py", "tp_dtensor.py"
_SCH, _ST, _TPP = "schedules.py", "stages.py", "torch_pipeline.py"

MUTANTS = [
    # tp_layers.py: the conjugate pair f / g and the two split layers
    Mutant("f_no_allreduce_backward", _TPL, "        dist.all_reduce(grad, group=ctx.group)\n        return grad, None",
           "        return grad, None", "tp_equivalence",
           "copy_to_tp's backward passes the partial input gradient through: LayerNorms and embeddings get 1/N of it"),
    Mutant("g_allreduce_backward", _TPL,  # g's backward: the `return grad, None` just before copy_to_tp
           "        return grad, None\n        # END SOLUTION\n\n\ndef copy_to_tp",
           "        grad = grad.clone()\n        dist.all_reduce(grad)\n        return grad, None\n"
           "        # END SOLUTION\n\n\ndef copy_to_tp",
           "tp_comm", "reduce_from_tp also all-reduces in backward (over the default group: forward kept no group on "
           "ctx): an extra collective per row-parallel layer"),
    Mutant("column_uses_g", _TPL, "return F.linear(copy_to_tp(x, self.group), self.weight, self.bias)",
           "return F.linear(reduce_from_tp(x, self.group), self.weight, self.bias)", "tp_equivalence",
           "f and g swapped in the column-parallel layer: its (replicated) input is all-reduced in forward"),
    Mutant("column_keeps_full_linear", _TPL,
           "        self.weight = nn.Parameter(linear.weight.detach()[rows].clone())\n",
           "        self.full = linear  # kept for reference\n"
           "        self.weight = nn.Parameter(linear.weight.detach()[rows].clone())\n", "tp_memory",
           "the column-parallel layer keeps the whole nn.Linear as a submodule: every rank still holds all of it"),
    Mutant("row_bias_before_reduce", _TPL,
           "        out = reduce_from_tp(F.linear(x, self.weight), self.group)\n"
           "        return out + self.bias if self.bias is not None else out",
           "        return reduce_from_tp(F.linear(x, self.weight, self.bias), self.group)", "tp_equivalence",
           "the row-parallel bias is added on every rank before the all-reduce: summed N times (invisible at bias 0)"),
    Mutant("row_bias_sliced", _TPL,
           "        self.bias = nn.Parameter(linear.bias.detach().clone()) if linear.bias is not None else None\n",
           "        self.bias = nn.Parameter(linear.bias.detach().clone() / dist.get_world_size(group)) "
           "if linear.bias is not None else None\n",
           "tp_equivalence",
           "the row-parallel bias is stored divided by N, as if it were summed (invisible at bias 0)"),
    # tensor_parallel.py: heads and the plan
    Mutant("qkv_rows_contiguous", _TP, "    part = block_rows(n_embd, rank, world)\n"
           "    return torch.cat([part, part + n_embd, part + 2 * n_embd])",
           "    return block_rows(3 * n_embd, rank, world)", "tp_equivalence",
           "qkv split into contiguous thirds of 3d rows: rank 0 gets all of q and half of k, not whole heads"),
    Mutant("heads_not_transposed_back", _TP, "y = y.transpose(1, 2).contiguous().view(B, T, width)",
           "y = y.contiguous().view(B, T, width)", "tp_equivalence",
           "attention output reshaped from (B, heads, T, hd) without the transpose: heads and positions mixed"),
    Mutant("attention_not_causal", _TP, "is_causal=True,", "is_causal=False,", "tp_equivalence",
           "the split attention forgets the causal mask"),
    Mutant("mlp_proj_wrong_columns", _TP, "block.mlp.proj = RowParallelLinear(block.mlp.proj, hidden, group)",
           "block.mlp.proj = RowParallelLinear(block.mlp.proj, block_rows(4 * d, world - 1 - rank, world), group)",
           "tp_equivalence", "the row-parallel layer takes other hidden units than the column-parallel one produced"),
    # tp_dtensor.py: the permutation and the plan
    Mutant("interleave_forgets_bias", _DT,
           "        if qkv.bias is not None:\n            qkv.bias.copy_(qkv.bias[order])\n",
           "", "tp_equivalence", "qkv's rows are permuted but its bias is not (invisible at bias 0)"),
    Mutant("no_interleave", _DT, "        interleave_qkv(a.qkv, cfg.n_head, world)\n", "", "tp_equivalence",
           "ColwiseParallel shards qkv contiguously without the head permutation"),
    Mutant("plan_proj_colwise", _DT, '"attn.proj": RowwiseParallel(),\n', '"attn.proj": ColwiseParallel(),\n',
           "tp_equivalence", "attention's output projection sharded on the wrong dim (Shard(0), not Shard(1))"),
    # schedules.py
    Mutant("loss_not_scaled", _SCH, "            out = loss / self.m  #", "            out = loss  #", "pp_equivalence",
           "each micro-batch's loss is not divided by m: the gradient is m times the batch's"),
    Mutant("backward_sends_nothing", _SCH,
           "        if not self.first:\n            self._send(x.grad, self.rank - 1)\n",
           "", "pp_equivalence", "backward never sends dL/dx upstream: the earlier stage waits forever"),
    Mutant("gpipe_not_pipelined", _SCH, "    for i in range(pipe.m):\n        pipe.forward(i)\n"
           "    for i in range(pipe.m):\n        pipe.backward(i)\n",
           "    for i in range(pipe.m):\n        pipe.forward(i)\n        pipe.backward(i)\n", "pp_bubble",
           "GPipe runs each micro-batch's backward before the next forward: the stages take turns"),
    Mutant("gpipe_waits_each_forward", _SCH, "    for i in range(pipe.m):\n        pipe.forward(i)\n    for i",
           "    for i in range(pipe.m):\n        pipe.forward(i)\n        dist.barrier()  # keep the stages in step\n"
           "    for i", "pp_bubble",
           "GPipe waits for the other stage after every forward: the order is right, the forwards run one stage "
           "after the other"),
    Mutant("1f1b_holds_m", _SCH, "    warmup = min(pipe.p - 1 - pipe.rank, pipe.m)",
           "    warmup = pipe.m", "pp_1f1b_memory", "1F1B warms up with all m forwards: it is GPipe, holding m"),
    Mutant("1f1b_warmup_off_by_one", _SCH, "    warmup = min(pipe.p - 1 - pipe.rank, pipe.m)",
           "    warmup = min(pipe.p - pipe.rank, pipe.m)", "pp_1f1b_memory",
           "1F1B warms up with p - rank forwards: one micro-batch more than needed on every stage"),
    # stages.py
    Mutant("stage_boundary_off", _ST,
           "range(stage * per, (stage + 1) * per), first=stage == 0, last=stage == n_stages - 1,\n",
           "range(stage * per, n_layer), first=stage == 0, last=stage == n_stages - 1,\n",
           "pp_equivalence", "each stage runs from its first block to the model's last: blocks run twice"),
    Mutant("stage_forgets_positions", _ST, "x = self.drop(self.tok_emb(x) + self.pos_emb(pos))",
           "x = self.drop(self.tok_emb(x))", "pp_equivalence", "the first stage leaves out the position embedding"),
    Mutant("tied_grads_not_summed", _ST, "    dist.all_reduce(tied.grad, group=stage.tied_group)\n", "",
           "pp_equivalence", "the tied embedding/head gradient is not summed across the first and last stage"),
    # torch_pipeline.py
    Mutant("torch_grads_unscaled", _TPP, "return cls(stage, n_microbatches=n_micro, loss_fn=loss_fn)",
           "return cls(stage, n_microbatches=n_micro, loss_fn=loss_fn, scale_grads=False)", "pp_equivalence",
           "torch's schedule sums the micro-batches' gradients instead of averaging them"),
    # blind: a learner who worked lab 6 from its README, starters and the checker's output only (never checker/)
    # broke their own solution 19 ways; 6 passed every check (SURVIVORS.md). The 13 that fail, on the reference:
    Mutant("f_backward_averages", _TPL, "        dist.all_reduce(grad, group=ctx.group)\n        return grad, None",
           "        dist.all_reduce(grad, group=ctx.group)\n        return grad / dist.get_world_size(ctx.group), None",
           "tp_equivalence", "copy_to_tp's backward averages the input gradient, as DDP averages its gradients",
           blind=True),
    Mutant("g_forward_averages", _TPL, "        dist.all_reduce(out, group=group)\n        return out",
           "        dist.all_reduce(out, group=group)\n        return out / dist.get_world_size(group)",
           "tp_equivalence", "reduce_from_tp averages the partial outputs instead of summing them", blind=True),
    Mutant("row_enters_with_f", _TPL,
           "        out = reduce_from_tp(F.linear(x, self.weight), self.group)\n        return",
           "        out = reduce_from_tp(F.linear(copy_to_tp(x, self.group), self.weight), self.group)\n        return",
           "tp_equivalence",
           "the row-parallel layer also wraps its input in copy_to_tp: its split input's gradient is summed over ranks",
           blind=True),
    Mutant("g_forward_all_gather", _TPL,
           "        out = x.contiguous().clone()\n        dist.all_reduce(out, group=group)\n        return out",
           "        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]\n"
           "        dist.all_gather(parts, x.contiguous(), group=group)\n        return torch.stack(parts).sum(0)",
           "tp_comm", "reduce_from_tp gathers every rank's partial output and sums locally: right values, N times "
           "the bytes, no all-reduce", blind=True),
    Mutant("heads_strided", _TP,
           "    part = block_rows(n_embd, rank, world)\n    return torch.cat([part, part + n_embd, part + 2 * n_embd])",
           "    hd = n_embd // n_head\n    part = torch.arange(n_embd).view(n_head, hd)[rank::world].flatten()\n"
           "    return torch.cat([part, part + n_embd, part + 2 * n_embd])", "tp_equivalence",
           "rank r takes heads r, r+N, ... (whole heads, round-robin) while proj keeps a contiguous block of columns",
           blind=True),
    Mutant("interleave_inverse_perm", _DT, "        qkv.weight.copy_(qkv.weight[order])\n",
           "        qkv.weight.copy_(qkv.weight[order.argsort()])\n", "tp_equivalence",
           "qkv's rows permuted by the inverse permutation (a scatter where a gather was needed)", blind=True),
    Mutant("last_stage_skips_ln_f", _ST, "            x = self.head(self.ln_f(x))", "            x = self.head(x)",
           "pp_equivalence", "the last stage applies the head without the final LayerNorm", blind=True),
    Mutant("tied_grads_averaged", _ST, "    dist.all_reduce(tied.grad, group=stage.tied_group)\n",
           "    dist.all_reduce(tied.grad, group=stage.tied_group)\n    tied.grad /= 2\n", "pp_equivalence",
           "the tied embedding/head gradient is averaged over its two copies, not summed", blind=True),
    Mutant("recv_no_requires_grad", _SCH, "            x = self._recv(self.rank - 1).requires_grad_()\n",
           "            x = self._recv(self.rank - 1)\n", "pp_equivalence",
           "the received activation does not require grad: no gradient to send back upstream", blind=True),
    Mutant("losses_recorded_scaled", _SCH,
           "            self.losses.append(loss.item())\n            out = loss / self.m  #",
           "            self.losses.append(loss.item() / self.m)\n            out = loss / self.m  #", "pp_equivalence",
           "the last stage records each micro-batch's loss already divided by m: losses m times too small",
           blind=True),
    Mutant("loss_divided_by_stages", _SCH, "            out = loss / self.m  #", "            out = loss / self.p  #",
           "pp_equivalence", "each micro-batch's loss divided by the number of stages, not of micro-batches",
           blind=True),
    Mutant("upstream_grad_rescaled", _SCH, "            out.backward(self._recv(self.rank + 1))\n",
           "            out.backward(self._recv(self.rank + 1) / self.m)\n", "pp_equivalence",
           "the gradient received from downstream divided by m again: the earlier stages' gradients 1/m too small",
           blind=True),
    Mutant("1f1b_warmup_by_rank", _SCH, "    warmup = min(pipe.p - 1 - pipe.rank, pipe.m)",
           "    warmup = min(pipe.rank, pipe.m)", "pp_equivalence",
           "1F1B's warm-up counted from the wrong end: the last stage warms up, the first goes straight to backward",
           blind=True),
    # blind, survived every check when written (tests/mutants/SURVIVORS.md), caught since
    Mutant("backward_keeps_activations", _SCH, "        x, out = self.saved.pop(i)\n",
           "        x, out = self.saved[i]\n", "pp_1f1b_memory",
           "backward reads a micro-batch's input and output without freeing them: they live to the end of the step",
           blind=True),
    Mutant("stages_round_robin", _ST, "    return GPTStage(model, range(stage * per, (stage + 1) * per),",
           "    return GPTStage(model, range(stage, n_layer, n_stages),", "pp_equivalence",
           "blocks dealt round-robin (stage s gets s, s+n, ...): the model's blocks run out of order once L > n",
           blind=True),
    Mutant("torch_schedules_swapped", _TPP, "cls = {\"gpipe\": ScheduleGPipe, \"1f1b\": Schedule1F1B}[schedule]",
           "cls = {\"gpipe\": Schedule1F1B, \"1f1b\": ScheduleGPipe}[schedule]", "pp_equivalence",
           "torch's schedule classes swapped: 'gpipe' runs 1F1B and '1f1b' GPipe (same numbers, other order)",
           blind=True),
    Mutant("row_weight_sliced_view", _TPL,
           "        self.weight = nn.Parameter(linear.weight.detach()[:, cols].clone())\n",
           "        self.weight = nn.Parameter(linear.weight.detach()[:, int(cols[0]):int(cols[-1]) + 1])\n",
           "tp_memory", "the row-parallel weight is a slice view of the full weight: it keeps the whole tensor's "
           "storage alive", blind=True),
    Mutant("blocking_send_forward", _SCH, "            self._send(out.detach(), self.rank + 1)\n",
           "            dist.send(out.detach().contiguous(), self.rank + 1)\n", "pp_equivalence",
           "the forward's activation sent with a blocking dist.send instead of paired with the next receive",
           blind=True),
    Mutant("g_forward_in_place", _TPL,
           "        out = x.contiguous().clone()\n        dist.all_reduce(out, group=group)\n        return out",
           "        dist.all_reduce(x, group=group)\n        return x", "tp_equivalence",
           "reduce_from_tp all-reduces its input in place and returns it (the contract says x is left unchanged)",
           blind=True),
]
