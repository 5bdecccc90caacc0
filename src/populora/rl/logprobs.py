"""Per-token log-probs and entropies from hidden states, a chunk of tokens at a time.

`response_logprobs(hidden [N, H], head, targets [N])` returns `log p(target)` and the entropy of every row's
next-token distribution (float32) without ever holding the `[N, V]` float32 logits: the vocabulary projection,
the log-softmax and the entropy run on `chunk_tokens` rows at a time. With gradients on, each chunk runs under
`torch.utils.checkpoint`, so autograd keeps only the chunk's hidden states (H values a token, not V) and
recomputes that chunk's logits in the backward pass. A 7B Qwen2 head (V = 152k) otherwise keeps ~2.4 MB of
logits, log-softmax and entropy temporaries per response token; chunked, the peak is one chunk's worth.

The values are the unchunked ones (`log_softmax(head(h).float())`, gathered; `-sum p log p`) up to float
rounding; `chunk_tokens=0` runs everything in one chunk without checkpointing (the old path, kept as the
reference the tests compare against).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.checkpoint import checkpoint

# Tokens per chunk: at a 152k vocabulary one chunk's float32 logits and temporaries are ~1.2 GB, small next to
# the activations of a 4k-token row, and the chunk's matmul is still large enough to keep a GPU busy.
LOGIT_CHUNK_TOKENS = 512


def _chunk(
    head: Callable[[torch.Tensor], torch.Tensor], h: torch.Tensor, targets: torch.Tensor, entropy_grad: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    logp_all = torch.log_softmax(head(h).float(), dim=-1)
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        ent = -(logp_all.exp() * logp_all).sum(-1)
    return logp, ent


def response_logprobs(
    hidden: torch.Tensor,
    head: Callable[[torch.Tensor], torch.Tensor],
    targets: torch.Tensor,
    *,
    chunk_tokens: int = LOGIT_CHUNK_TOKENS,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(`logp [N]`, `entropy [N]`), float32, for hidden states `[N, H]`, the output projection `head`
    (`[n, H] -> [n, V]`) and target token ids `[N]`.

    `entropy_grad`: the entropy carries a gradient (an entropy bonus in the loss); otherwise it is detached,
    and only `logp` back-propagates. `chunk_tokens <= 0` or `>= N`: one chunk, no recomputation.
    """
    if hidden.shape[0] != targets.shape[0]:
        raise ValueError(f"{hidden.shape[0]} hidden states but {targets.shape[0]} targets")
    n = hidden.shape[0]
    if chunk_tokens <= 0 or n <= chunk_tokens:
        return _chunk(head, hidden, targets, entropy_grad)
    # Recompute in the backward pass only where there is one: under no_grad a chunk keeps nothing anyway.
    recompute = torch.is_grad_enabled() and hidden.requires_grad
    logps, ents = [], []
    for start in range(0, n, chunk_tokens):
        h, t = hidden[start : start + chunk_tokens], targets[start : start + chunk_tokens]
        if recompute:
            # the head has no randomness: no RNG state to stash and replay
            lp, ent = checkpoint(
                _chunk, head, h, t, entropy_grad, use_reentrant=False, preserve_rng_state=False
            )
        else:
            lp, ent = _chunk(head, h, t, entropy_grad)
        logps.append(lp)
        ents.append(ent)
    return torch.cat(logps), torch.cat(ents)


__all__ = ["LOGIT_CHUNK_TOKENS", "response_logprobs"]
