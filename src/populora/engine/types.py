"""The engine's data types (`GenRequest`, `Generation`, `TrainRow`, `TrainBatch`), the `PolicyEngine` protocol and
the PEFT-folder methods engines share (`PeftFolderIO`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from populora.lora.adapter import LoRAAdapter


class EngineError(RuntimeError):
    """A user-fixable engine problem (bad slot, missing model, bad request); the message says the fix."""


@dataclass(frozen=True)
class GenRequest:
    """One sequence to sample from adapter slot `slot`.

    `prompt` is text (tokenised without adding special tokens) or a list of token ids.
    `temperature == 0` means greedy; `top_p` in (0, 1] is nucleus sampling.
    """

    slot: int
    prompt: str | Sequence[int]
    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0


@dataclass
class Generation:
    """A sampled continuation.

    `token_ids` are the generated ids only (the EOS token included when it stopped there), `text` their
    decoding without special tokens, `logprobs[i]` the log-probability of `token_ids[i]` under the slot's
    unmodified distribution (temperature 1, no top-p, i.e. the policy that `train_step` optimises),
    `finish_reason` "stop" (EOS) or "length". `prompt_ids` and `slot` are echoed for building a `TrainBatch`.
    """

    token_ids: list[int]
    text: str
    logprobs: list[float]
    finish_reason: str
    prompt_ids: list[int] = field(default_factory=list)
    slot: int = -1


@dataclass
class TrainRow:
    """One training sequence: `prompt_ids` are context, the loss is on `response_ids`.

    `advantages` is one float per response token, or one scalar broadcast over the row's tokens.
    `old_logprobs` (one per response token) are the sampler's log-probs, used by the PPO clip.
    `loss_group` splits a slot's rows into separately normalised parts of its loss (`loss_key`): the trainer
    sets the role, so a single agent's proposer rows weigh in its loss as a teacher's rows weigh in a
    teacher's, however many solver rows share the slot. '' (the default) normalises the slot as one group.
    """

    slot: int
    prompt_ids: Sequence[int]
    response_ids: Sequence[int]
    advantages: float | Sequence[float]
    old_logprobs: Sequence[float] | None = None
    loss_group: str = ""

    @property
    def loss_key(self) -> tuple[int, str]:
        """The loss-normalisation group of this row: (slot, loss_group); see `rl.loss.row_weights`."""
        return (self.slot, self.loss_group)

    def advantage_list(self) -> list[float]:
        n = len(self.response_ids)
        if isinstance(self.advantages, int | float):
            return [float(self.advantages)] * n
        adv = [float(a) for a in self.advantages]
        if len(adv) != n:
            raise EngineError(
                f"row of slot {self.slot}: {len(adv)} advantages for {n} response tokens; "
                "give one per token or a single float."
            )
        return adv


@dataclass
class TrainBatch:
    """Rows from any number of slots, trained together by one `train_step`."""

    rows: list[TrainRow]

    @property
    def slots(self) -> list[int]:
        return sorted({r.slot for r in self.rows})

    @property
    def n_tokens(self) -> int:
        return sum(len(r.response_ids) for r in self.rows)


@runtime_checkable
class PolicyEngine(Protocol):
    """N LoRA adapter slots on one frozen base model: generate mixed-slot batches, train from mixed batches."""

    n_slots: int
    tokenizer: object

    def generate(self, requests: list[GenRequest], seed: int | None = None) -> list[Generation]:
        """One mixed-slot batch; `seed` makes the sampling reproducible (the trainer derives it per phase).

        Optional keywords an engine may take (the trainer checks the signature): `progress(done, total, info)`
        and `on_finish(i, generation)`, called once per request as its row stops, before the call returns, with
        the object the call returns (the hf and vllm engines per row, the distributed engine per worker share;
        the trainer hands those rows to the sandbox while the rest decode)."""
        ...

    def train_step(self, batch: TrainBatch) -> dict[str, float]:
        """One optimiser step on every slot in `batch`; returns `loss/<slot>`, `grad_norm/<slot>`, ...`."""
        ...

    def optimizer_state(self) -> dict:
        """Every slot's AdamW moments and step counts (what a checkpoint stores)."""
        ...

    def load_optimizer_state(self, state: dict) -> None:
        """Restore what `optimizer_state` returned."""
        ...

    def close(self) -> None:
        """Release what the engine holds (GPU memory, scratch folders); a no-op where there is nothing."""
        ...

    def get_adapter(self, slot: int) -> LoRAAdapter: ...

    def set_adapter(self, slot: int, adapter: LoRAAdapter, reset_optimizer: bool = True) -> None: ...

    def save_adapter(self, slot: int, path: str | Path) -> None: ...

    def load_adapter(self, slot: int, path: str | Path) -> None: ...


class PeftFolderIO:
    """`save_adapter` / `load_adapter` in PEFT's folder format, for an engine that has `get_adapter`,
    `set_adapter`, `model_name` and `targets` (the hf engine, and the distributed engine on its driver)."""

    def save_adapter(self, slot: int, path: str | Path) -> None:
        """Write slot `slot` as a PEFT LoRA folder (adapter_config.json + adapter_model.safetensors)."""
        from populora.lora.peft_io import save_peft

        save_peft(
            self.get_adapter(slot), path, base_model_name_or_path=self.model_name, target_modules=self.targets
        )

    def load_adapter(self, slot: int, path: str | Path, reset_optimizer: bool = True) -> None:
        """Load a PEFT LoRA folder into slot `slot` (targets and rank must match the engine's)."""
        from populora.lora.peft_io import load_peft

        self.set_adapter(slot, load_peft(path), reset_optimizer=reset_optimizer)
