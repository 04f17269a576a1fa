"""Lab 9's mutants: one realistic slip each, and the check that must catch it."""
from . import Mutant

# ring.py's forward step, whole: the sends_at_the_last_step mutant drops both of its `step < world - 1` guards
_FWD_STEP = ("            if step < world - 1:\n"
             "                nxt_kv, handles = _shift(kv, nxt, prv, group)  # in flight during this step's tiles\n"
             "            o_i, lse_i = attend(q, kv[0], kv[1], q_pos, positions(s, src, world, layout, q.device), "
             "causal, block,\n                                block)\n"
             "            out, lse = (o_i, lse_i) if out is None else merge(out, lse, o_i, lse_i)\n"
             "            if step < world - 1:\n                _wait(handles)\n                kv = nxt_kv\n")
# ... and waits_before_computing receives the next block before this block's tiles (blocking, in effect)
_FWD_STEP_WAITS_FIRST = (_FWD_STEP.replace("  # in flight during this step's tiles\n",
                                           "\n                _wait(handles)\n")
                         .replace("if step < world - 1:\n                _wait(handles)\n                kv",
                                  "if step < world - 1:\n                kv"))
_FWD_STEP_UNGUARDED = (_FWD_STEP.replace("            if step < world - 1:\n    ", "")
                       .replace("            if step < world - 1:\n                _wait(handles)\n    ",
                                "            _wait(handles)\n").replace("    kv = nxt_kv", "kv = nxt_kv"))

MUTANTS = [
    Mutant("online_softmax_not_rescaled", "flash.py",
           "            acc = acc * alpha[..., None] + p @ v[:, :, j:j + block_k]\n",
           "            acc = acc + p @ v[:, :, j:j + block_k]\n",
           "flash_equivalence", "a tile that raises the running max leaves the output summed so far at the old scale"),
    Mutant("lse_without_the_max", "flash.py", "        lse[:, :, i:i + block_q] = m + torch.log(ell)\n",
           "        lse[:, :, i:i + block_q] = torch.log(ell)\n",
           "flash_equivalence", "lse saved as log of the shifted sum, without the max: backward's probabilities wrong"),
    Mutant("backward_drops_the_short_tile", "flash.py",
           "        for i in range(0, sq, block_q):\n            qp = q_pos[i:i + block_q]\n",
           "        for i in range(0, sq // block_q * block_q, block_q):\n            qp = q_pos[i:i + block_q]\n",
           "flash_equivalence", "backward's query loop written for s a multiple of the tile: the last rows get none"),
    Mutant("scores_kept_for_backward", "flash.py", "        ctx.save_for_backward(q, k, v, o, lse)\n",
           "        ctx.save_for_backward(q, k, v, o, lse, q @ k.transpose(-2, -1))\n",
           "flash_memory", "the s x s scores kept 'to save recomputing them': the memory flash exists to avoid"),
    Mutant("ring_reuses_local_v", "ring.py", "attend(q, kv[0], kv[1], q_pos, positions(s, src, world, layout",
           "attend(q, kv[0], v, q_pos, positions(s, src, world, layout",
           "ring_equivalence", "the ring attends to the arriving K but to its own V"),
    Mutant("causal_mask_in_local_positions", "ring.py",
           "attend(q, kv[0], kv[1], q_pos, positions(s, src, world, layout, q.device), causal",
           "attend(q, kv[0], kv[1], q_pos, q_pos, causal", "ring_equivalence",
           "every block masked as if it were the diagonal one: the mask compares local, not global, positions"),
    Mutant("zigzag_chunks_swapped", "zigzag.py",
           "torch.cat([chunks[rank], chunks[2 * world - 1 - rank]], dim)",
           "torch.cat([chunks[2 * world - 1 - rank], chunks[rank]], dim)",
           "ring_equivalence", "zig-zag chunks held late chunk first: the rows are not where the layout says"),
    Mutant("zigzag_second_chunk_n_plus_r", "zigzag.py",
           "torch.cat([chunks[rank], chunks[2 * world - 1 - rank]], dim)",
           "torch.cat([chunks[rank], chunks[world + rank]], dim)",
           "zigzag_balance", "rank r takes chunks r and N+r: the last rank still holds the latest, costliest rows"),
    Mutant("no_tile_skipping", "flash.py",
           "            if causal and kp.min() > qp.max():\n"
           "                continue  # the whole tile is in the future of every query of this tile\n", "",
           "zigzag_balance", "tiles above the diagonal computed and masked away: causal costs as much as full"),
    Mutant("sends_at_the_last_step", "ring.py", _FWD_STEP, _FWD_STEP_UNGUARDED,
           "ring_bytes", "forward passes the block on after the last step too: N hops, the last one wasted"),
    Mutant("waits_before_computing", "ring.py", _FWD_STEP, _FWD_STEP_WAITS_FIRST, "ring_overlap",
           "the next block is received before this block's tiles start: link and cores take turns"),
    Mutant("ulysses_rows_interleaved", "ulysses.py",
           "    return recv.permute(1, 2, 0, 3, 4).reshape(b, h // world, world * sl, d)\n",
           "    return recv.permute(1, 2, 3, 0, 4).reshape(b, h // world, world * sl, d)\n",
           "ulysses_equivalence", "the arriving blocks laid along the wrong dim: peers' rows interleaved"),
    Mutant("ulysses_no_head_check", "ulysses.py",
           "    if h % world:\n        raise ValueError(", "    if False:\n        raise ValueError(",
           "ulysses_equivalence", "no check that the ranks divide the heads: an obscure reshape error instead"),
    Mutant("ulysses_gathers_the_sequence", "ulysses.py",
           "    qh, kh, vh = (_SeqToHeads.apply(t, group) for t in (q, k, v))\n"
           "    return _HeadsToSeq.apply(F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal), group)\n",
           "    from torch.distributed.nn.functional import all_gather\n"
           "    qf, kf, vf = (torch.cat(all_gather(t.contiguous(), group=group), 2) for t in (q, k, v))\n"
           "    n, r = q.shape[2], dist.get_rank(group)\n"
           "    return F.scaled_dot_product_attention(qf, kf, vf, is_causal=causal)[:, :, r * n:(r + 1) * n]\n",
           "ulysses_bytes", "every rank all-gathers q, k, v and attends the whole sequence: N/(4/3) times the bytes"),
    Mutant("cp_local_positions", "cp_step.py", "    model.pos_emb.forward = lambda pos: embed(glob[pos])\n", "",
           "cp_dp_equivalence", "context parallel without global positions: every rank's first token is position 0"),
    Mutant("cp_gradients_summed", "cp_step.py", "            p.grad /= world\n", "",
           "cp_dp_equivalence", "the ranks' gradient shares summed, not averaged: a step N times too large"),
    # blind: a learner who worked lab 9 from labs/ only (9/9 in ~9 min, no hints) broke their own solution 25 ways;
    # 22 failed the public grade, one only a hidden variant, two nothing. Those three, re-expressed here:
    Mutant("dkv_sent_the_wrong_way", "ring.py",
           "            pending = _shift(dkv, nxt, prv, group) if world > 1 else (dkv, [])",
           "            pending = _shift(dkv, prv, nxt, group) if world > 1 else (dkv, [])", "ring_equivalence",
           "the running dK, dV travel against the ring: at 2 ranks next and previous are one rank, so only 3 show it",
           blind=True),
    Mutant("backward_computes_every_tile", "flash.py",
           "            if causal and kp.min() > qp.max():\n                continue\n            qi, doi",
           "            qi, doi", "zigzag_balance",
           "backward computes the tiles above the diagonal (then masks them): forward alone was counted", blind=True),
    Mutant("merge_without_normalising", "flash.py",
           "    o = o1 * torch.exp(lse1 - safe)[..., None] + o2 * torch.exp(lse2 - safe)[..., None]",
           "    o = o1 * torch.exp(lse1)[..., None] + o2 * torch.exp(lse2)[..., None]", "ring_equivalence",
           "partials weighted by e^lse without dividing by the total", blind=True),
    Mutant("row_sum_not_rescaled", "flash.py", "            ell = ell * alpha + p.sum(-1)\n",
           "            ell = ell + p.sum(-1)\n", "flash_equivalence",
           "the running row sum is not rescaled when the max rises (the output accumulator is)", blind=True),
    Mutant("dk_assigned_per_query_tile", "flash.py",
           "            dk[:, :, j:j + block_k] += (ds.transpose(-2, -1) @ qi) * scale\n",
           "            dk[:, :, j:j + block_k] = (ds.transpose(-2, -1) @ qi) * scale\n", "flash_equivalence",
           "dK of a key tile assigned per query tile instead of summed over them: backward keeps the last", blind=True),
    Mutant("softmax_backward_without_delta", "flash.py",
           "            ds = p * (doi @ vj.transpose(-2, -1) - delta[:, :, i:i + block_q, None])\n",
           "            ds = p * (doi @ vj.transpose(-2, -1))\n", "flash_equivalence",
           "the softmax's backward without the row term rowsum(dO * O)", blind=True),
    Mutant("arriving_keys_placed_contiguously", "ring.py",
           "o_i, lse_i = attend(q, kv[0], kv[1], q_pos, positions(s, src, world, layout, q.device)",
           'o_i, lse_i = attend(q, kv[0], kv[1], q_pos, positions(s, src, world, "contiguous", q.device)',
           "ring_equivalence", "an arriving block's key positions as if contiguous, under zig-zag", blind=True),
    Mutant("dkv_passed_on_without_own_share", "ring.py", "                dkv = dkv + recv\n",
           "                dkv = recv\n", "ring_equivalence",
           "the running dK, dV passed on without this rank's share added", blind=True),
    Mutant("ulysses_heads_strided", "ulysses.py",
           "    send = x.reshape(b, world, h // world, sl, d).transpose(0, 1).contiguous()",
           "    send = x.reshape(b, h // world, world, sl, d).permute(2, 0, 1, 3, 4).contiguous()",
           "ulysses_equivalence", "heads dealt round-robin going out, contiguously coming back", blind=True),
    Mutant("cp_positions_contiguous", "cp_step.py",
           "    glob = positions(seq_len, rank, world, layout, model.pos_emb.weight.device)",
           '    glob = positions(seq_len, rank, world, "contiguous", model.pos_emb.weight.device)',
           "cp_dp_equivalence", "the position embedding at contiguous positions on zig-zag tokens", blind=True),
    Mutant("cp_returns_the_local_loss", "cp_step.py", "    dist.all_reduce(loss, group=group)\n    loss /= world\n",
           "", "cp_dp_equivalence", "the step returns this rank's loss, not the global batch's mean", blind=True),
]
