"""PEFT's examples/sft QLoRA+FSDP recipe (train.py, utils.py, run_peft_qlora_fsdp.sh) with GPU memory probes.

Usage: accelerate launch --config_file CFG train_with_probes.py MODEL_DIR DATA_DIR OUT_DIR [--snapshot]

Each probe records torch.cuda max allocated/reserved since the previous probe (it resets the peaks), so a record
is the peak of the span that ends at its phase name. Records go to OUT_DIR/mem_rank<R>.json after every probe, so
a crash still leaves the phases that ran. --snapshot also dumps rank 0's allocator trace
(torch.cuda.memory._dump_snapshot) after training and after the final save, for finding what is live at a peak.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import compat_shims
import torch

MiB = 2**20


class MemoryProbe:
    def __init__(self, out_dir: Path, rank: int) -> None:
        self.out_dir = out_dir
        self.rank = rank
        self.records: list[dict[str, Any]] = []
        self.run_max: dict[str, Any] = {"allocated": 0, "reserved": 0, "alloc_phase": None, "resv_phase": None}
        self.t0 = time.time()

    def record(self, phase: str, extra: dict[str, Any] | None = None) -> None:
        # Without the synchronize a probe could read the counters before queued frees/allocs; in native mode
        # kernels do not run, but the call keeps the probe correct on a real GPU too.
        torch.cuda.synchronize()
        stats = torch.cuda.memory_stats()
        rec = {
            "phase": phase,
            "t": round(time.time() - self.t0, 1),
            "allocated": torch.cuda.memory_allocated(),
            "reserved": torch.cuda.memory_reserved(),
            "max_allocated": torch.cuda.max_memory_allocated(),
            "max_reserved": torch.cuda.max_memory_reserved(),
            "reserved_bytes.all.peak": stats.get("reserved_bytes.all.peak", 0),
            "active_bytes.all.peak": stats.get("active_bytes.all.peak", 0),
            "segment.all.current": stats.get("segment.all.current", 0),
            "num_alloc_retries": stats.get("num_alloc_retries", 0),
        }
        if extra:
            rec.update(extra)
        self.records.append(rec)
        if rec["max_allocated"] > self.run_max["allocated"]:
            self.run_max["allocated"], self.run_max["alloc_phase"] = rec["max_allocated"], phase
        if rec["max_reserved"] > self.run_max["reserved"]:
            self.run_max["reserved"], self.run_max["resv_phase"] = rec["max_reserved"], phase
        print(
            f"[mem r{self.rank}] {phase:38s} alloc {rec['allocated'] / MiB:9.1f} resv {rec['reserved'] / MiB:9.1f} "
            f"maxA {rec['max_allocated'] / MiB:9.1f} maxR {rec['max_reserved'] / MiB:9.1f}",
            flush=True,
        )
        torch.cuda.reset_peak_memory_stats()
        self.dump()

    def dump(self) -> None:
        data = {"rank": self.rank, "records": self.records, "run_max": self.run_max}
        (self.out_dir / f"mem_rank{self.rank}.json").write_text(json.dumps(data, indent=1))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir")
    parser.add_argument("data_dir")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--snapshot", action="store_true", help="record rank 0's allocator trace (slower)")
    return parser.parse_args()


def main() -> None:
    cli = parse_args()
    rank = int(os.environ.get("RANK", "0"))
    cli.out_dir.mkdir(parents=True, exist_ok=True)
    # bitsandbytes is imported through peft/trl below, so the stub has to be in place first.
    compat_shims.install_triton_ops_stub()

    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    record_trace = cli.snapshot and rank == 0
    if record_trace:
        torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=100000)

    def snapshot(tag: str) -> None:
        if record_trace:
            torch.cuda.memory._dump_snapshot(str(cli.out_dir / f"snapshot_rank0_{tag}.pickle"))

    probe = MemoryProbe(cli.out_dir, rank)
    probe.record("start")

    from datasets import load_from_disk
    from peft import LoraConfig
    from peft.utils.other import fsdp_auto_wrap_policy
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        BitsAndBytesConfig,
        TrainerCallback,
        TrainingArguments,
        set_seed,
    )
    from trl import SFTTrainer

    # PEFT's train.py builds TrainingArguments before loading the model. That initialises torch.distributed,
    # which makes transformers' is_fsdp_enabled() true and the load take the cpu_ram_efficient_loading path
    # (quantize on GPU, keep 4-bit weights on CPU). Loading first measures a different load.
    args = TrainingArguments(
        output_dir=str(cli.out_dir / "ckpt"),
        seed=100,
        num_train_epochs=1,
        logging_steps=5,
        log_level="info",
        logging_strategy="steps",
        evaluation_strategy="epoch",
        save_strategy="epoch",
        bf16=True,
        learning_rate=1e-4,
        lr_scheduler_type="cosine",
        weight_decay=1e-4,
        warmup_ratio=0.0,
        max_grad_norm=1.0,
        per_device_train_batch_size=2,
        per_device_eval_batch_size=2,
        gradient_accumulation_steps=2,
        gradient_checkpointing=True,
        report_to=[],
        dataloader_num_workers=0,
    )
    probe.record("after_training_args(dist_init)")
    compat_shims.route_object_collectives_via_gloo()
    set_seed(100)

    bnb_config = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_compute_dtype=torch.bfloat16,
        bnb_4bit_use_double_quant=True,
        bnb_4bit_quant_storage=torch.bfloat16,
    )
    # sdpa, not the recipe's flash_attention_2: flash-attn has no wheel for this torch and its kernels could not
    # run here anyway.
    model = AutoModelForCausalLM.from_pretrained(
        cli.model_dir,
        quantization_config=bnb_config,
        trust_remote_code=True,
        attn_implementation="sdpa",
        torch_dtype=torch.bfloat16,
    )
    probe.record("after_model_load")
    peft_config = LoraConfig(
        lora_alpha=16, lora_dropout=0.1, r=8, bias="none", task_type="CAUSAL_LM", target_modules="all-linear"
    )
    tokenizer = AutoTokenizer.from_pretrained(cli.model_dir)
    tokenizer.pad_token = tokenizer.eos_token

    model.config.use_cache = not args.gradient_checkpointing
    # The recipe's setting, and the one the estimator's --checkpoint-impl hf-reentrant models.
    args.gradient_checkpointing_kwargs = {"use_reentrant": True}
    splits = load_from_disk(cli.data_dir)

    class PhaseProbes(TrainerCallback):
        def on_train_begin(self, *a: Any, **kw: Any) -> None:
            probe.record("fsdp_wrap+optim_create(on_train_begin)")

        def on_step_begin(self, _args: Any, state: Any, *a: Any, **kw: Any) -> None:
            probe.record(f"step{state.global_step + 1}_begin")

        def on_step_end(self, _args: Any, state: Any, *a: Any, **kw: Any) -> None:
            probe.record(f"step{state.global_step}_end(after_optim)")

        def on_epoch_end(self, *a: Any, **kw: Any) -> None:
            probe.record("epoch_end")

        def on_evaluate(self, *a: Any, **kw: Any) -> None:
            probe.record("after_evaluate")

        def on_save(self, *a: Any, **kw: Any) -> None:
            probe.record("after_epoch_checkpoint_save(SHARDED)")

        def on_train_end(self, *a: Any, **kw: Any) -> None:
            probe.record("train_end")

    trainer = SFTTrainer(
        model=model,
        tokenizer=tokenizer,
        args=args,
        train_dataset=splits["train"],
        eval_dataset=splits["test"],
        peft_config=peft_config,
        packing=True,
        dataset_kwargs={"append_concat_token": False, "add_special_tokens": False},
        dataset_text_field="content",
        max_seq_length=2048,
        callbacks=[PhaseProbes()],
    )
    trainer.accelerator.print(f"{trainer.model}")
    trainer.model.print_trainable_parameters()
    if getattr(trainer.accelerator.state, "fsdp_plugin", None):
        # LoRA leaves get FSDP units of their own, so decoder-layer flat params are frozen. transformers 4.39's
        # Trainer sets the same policy in train() (_fsdp_qlora_plugin_updates); set here so the probe keeps it.
        trainer.accelerator.state.fsdp_plugin.auto_wrap_policy = fsdp_auto_wrap_policy(trainer.model)
    print(f"[r{rank}] packed train {len(trainer.train_dataset)} eval {len(trainer.eval_dataset)}", flush=True)
    probe.record("after_sfttrainer_init")

    # Trainer has no callback between a micro-step's forward and backward, so wrap the two methods it calls.
    compute_loss, training_step = trainer.compute_loss, trainer.training_step
    micro = {"i": 0, "in_train": False}

    def probed_compute_loss(model: Any, inputs: Any, return_outputs: bool = False) -> Any:
        out = compute_loss(model, inputs, return_outputs=return_outputs)
        if micro["in_train"]:  # evaluation calls compute_loss too
            probe.record(f"micro{micro['i']}_forward")
        return out

    def probed_training_step(model: Any, inputs: Any) -> Any:
        micro["i"] += 1
        micro["in_train"] = True
        probe.record(f"micro{micro['i']}_pre")
        loss = training_step(model, inputs)
        probe.record(f"micro{micro['i']}_backward")
        micro["in_train"] = False
        return loss

    trainer.compute_loss = probed_compute_loss
    trainer.training_step = probed_training_step
    # Global optimizer hooks: the optimizer only exists inside train(), after the FSDP wrap.
    register_optimizer_step_pre_hook(lambda *a: probe.record("pre_optimizer_step(clip_grad)"))
    register_optimizer_step_post_hook(lambda *a: probe.record("optimizer_step"))

    trainer.train()
    snapshot("after_train")
    probe.record("before_final_save")
    if trainer.is_fsdp_enabled:
        # As PEFT's train.py: the final save gathers a full state dict, the epoch checkpoint stays sharded.
        trainer.accelerator.state.fsdp_plugin.set_state_dict_type("FULL_STATE_DICT")
    trainer.save_model()
    probe.record("after_final_save(FULL_STATE_DICT)")
    snapshot("final")
    probe.run_max["elapsed_s"] = round(time.time() - probe.t0, 1)
    probe.dump()
    print(
        f"[mem r{rank}] RUN MAX allocated {probe.run_max['allocated'] / MiB:.1f} MiB ({probe.run_max['alloc_phase']}) "
        f"reserved {probe.run_max['reserved'] / MiB:.1f} MiB ({probe.run_max['resv_phase']})",
        flush=True,
    )


if __name__ == "__main__":
    main()
