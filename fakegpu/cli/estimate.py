"""`fakegpu estimate-llm`, `fakegpu plan-training`, `fakegpu calibrate compare`: will it fit, before any run."""

from __future__ import annotations

from pathlib import Path

import typer

from fakegpu.cli.output import emit_json, fail
from fakegpu.cli.paths import MODEL_DIR_ACCEPTED, given_path
from fakegpu.errors import EXIT_CHECK_FAILED, EXIT_OK, FakeGPUError
from fakegpu.text import human_bytes, table

calibrate_app = typer.Typer(help="Compare predictions with real measurements.", no_args_is_help=True)

CHECK_HELP = "Exit with code 3 when the workload does not fit the target profile."
WORKSPACE_FILE_HELP = ("A workspace-profiles file of your own (CUDA context and cuBLAS workspace per software stack, "
                       "see `fakegpu workspace-profiles`); its entries come before the built-in ones. Repeat.")
TORCH_HELP = "The torch the prediction is for (2.15.0+cu132); default: the workspace profiles' default stack."
CUDA_HELP = "The CUDA version the prediction is for (12.8); default: torch's +cuXYZ tag, else the default stack."


def _phase_rows(phases: dict) -> list[tuple]:
    rows = []
    for name, phase in phases.items():
        parts = ", ".join(f"{k}={human_bytes(v)}" for k, v in phase["components"].items() if v)
        rows.append((name, human_bytes(phase["max_memory_allocated"]), human_bytes(phase["max_memory_reserved"]),
                     human_bytes(phase["nvidia_smi_used"]), parts))
    return rows


def _print_target(target: dict | None, extra: tuple[tuple[str, str], ...]) -> None:
    if not target:
        return
    typer.echo(f"\ntarget: {target['name']} ({target['profile']}): {target['verdict']}, "
               f"headroom {human_bytes(target['headroom_bytes'])}")
    for key, label in extra:
        if target.get(key) is not None:
            typer.echo(f"  {label}: {target[key]}")


def _finish(command: str, report: dict, check: bool, as_json: bool, render) -> None:
    target = report.get("target")
    code = EXIT_CHECK_FAILED if check and target and target["verdict"] == "does-not-fit" else EXIT_OK
    if as_json:
        emit_json(command, report, code)
    else:
        render(report)
    if code:
        raise typer.Exit(code)


def estimate_llm(
    model_dir: str = typer.Option(..., "--model-dir", metavar="PATH", help="Model folder, a .safetensors file, or an "
                                  "index json."),
    batch_size: int = typer.Option(1, "--batch-size"),
    prompt_tokens: int = typer.Option(128, "--prompt-tokens"),
    generated_tokens: int = typer.Option(128, "--generated-tokens"),
    dtype: str = typer.Option("auto", "--dtype", help="Load/compute dtype: auto (as stored), bf16, fp16, fp32."),
    kv_cache_dtype: str = typer.Option("auto", "--kv-cache-dtype", help="auto (= compute dtype), bf16, fp16, fp8."),
    attention: str = typer.Option("sdpa", "--attention", help="sdpa, eager or flash."),
    tensor_parallel: int = typer.Option(1, "--tensor-parallel", help="Ranks the model is split across."),
    logits: str = typer.Option("last", "--logits", help="Prefill logits for the last token (HF generate) or all."),
    target_profile: str | None = typer.Option(None, "--target-profile", help="Profile to check the fit on."),
    workspace_files: list[Path] = typer.Option([], "--workspace-file", help=WORKSPACE_FILE_HELP),
    torch_version: str | None = typer.Option(None, "--torch-version", help=TORCH_HELP),
    cuda_version: str | None = typer.Option(None, "--cuda-version", help=CUDA_HELP),
    check: bool = typer.Option(False, "--check", help=CHECK_HELP),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Predict inference memory (prefill and decode) from safetensors headers and config.json."""
    from fakegpu.estimate.inference import InferenceOptions
    from fakegpu.estimate.llm import estimate_llm as run
    from fakegpu.estimate.llm import user_dtype

    try:
        source = given_path(model_dir, "--model-dir", MODEL_DIR_ACCEPTED)
        kv = user_dtype(kv_cache_dtype, "--kv-cache-dtype")
        opts = InferenceOptions(batch_size, prompt_tokens, generated_tokens, "BF16", kv, attention, tensor_parallel,
                                logits)
        report = run(source, opts, target=target_profile, dtype=dtype, workspace_files=workspace_files,
                     torch_version=torch_version, cuda_version=cuda_version)
    except FakeGPUError as exc:
        raise fail("estimate-llm", exc, as_json) from exc

    def render(r: dict) -> None:
        m = r["model"]
        typer.echo(f"{m['model_type']}: {m['parameter_count']:,} parameters, {m['weight_bytes']:,} weight bytes "
                   f"({human_bytes(m['weight_bytes'])}) in {m['tensor_count']} tensors, {m['files']} file(s)")
        typer.echo(table(_phase_rows(r["phases"]), ["PHASE", "ALLOCATED", "RESERVED", "NVIDIA-SMI", "COMPONENTS"]))
        _print_target(r["target"], (("max_batch_size", "largest batch"), ("max_context_tokens", "largest context")))
        for note in r["notes"]:
            typer.echo(f"note: {note}")

    _finish("estimate-llm", report, check, as_json, render)


def _print_megatron(section: dict) -> None:
    rows = [(str(st["stage"]), str(st["layers"]), f"{st['in_flight_microbatches']:g}",
             human_bytes(st["model_state_bytes"]), human_bytes(st["activations_bytes"]),
             human_bytes(st["max_memory_allocated"]), human_bytes(st["max_memory_reserved"]))
            for st in section["stages"]]
    typer.echo(f"\npipeline stages (phases above are stage {section['peak_stage']}, the highest):")
    typer.echo(table(rows, ["STAGE", "LAYERS", "IN FLIGHT", "MODEL STATES", "ACTIVATIONS", "ALLOCATED", "RESERVED"]))
    a = section["assumptions"]
    typer.echo(f"assumed: TP {a['tensor_parallel']} x PP {a['pipeline_parallel']} x DP {a['data_parallel']}, "
               f"sequence parallel {'on' if a['sequence_parallel'] else 'off'}, recompute {a['recompute']}, "
               f"attention {a['attention']}, {a['pp_schedule']} schedule, {a['microbatches_per_step']} micro-batches "
               f"per step ({a['microbatches_from']}), optimizer shards {a['optimizer_shards']}")


def plan_training(
    model_dir: str = typer.Option(..., "--model-dir", metavar="PATH", help="Model folder, a .safetensors file, or an "
                                  "index json."),
    method: str | None = typer.Option(None, "--method", help="full (default), lora, qlora, ia3 or prompt-tuning."),
    lora_rank: int | None = typer.Option(None, "--lora-rank", help="Default 16."),
    lora_targets: str | None = typer.Option(None, "--lora-targets", help="Comma list of adapted modules "
                                            "(q_proj,v_proj or short q,k,v,o,gate,up,down) or all-linear; each "
                                            "module's saved input and x@A are counted from its shapes. For ia3 the "
                                            "default is k,v,down."),
    dora: bool | None = typer.Option(None, "--dora/--no-dora", help="DoRA on top of lora/qlora (PEFT use_dora): "
                                     "magnitude vector, saved base/LoRA results, weight-norm temporaries."),
    virtual_tokens: int | None = typer.Option(None, "--virtual-tokens", help="prompt-tuning: virtual tokens "
                                              "prepended to every sequence (default 20)."),
    lora_dropout: float | None = typer.Option(None, "--lora-dropout", help="LoRA dropout (default 0.0, as PEFT)."),
    optimizer: str | None = typer.Option(None, "--optimizer", help="adamw (default), adamw-8bit (bitsandbytes/torchao: "
                                         "2 bytes/param), paged-adamw, paged-adamw-8bit (bitsandbytes paged: states "
                                         "in unified memory, outside the allocator), sgd or adafactor."),
    framework: str | None = typer.Option(None, "--framework", help="generic (transformers/PEFT, default), litgpt, "
                                         "torchtune, or megatron (Megatron-LM: per-stage memory, the flags below)."),
    loss: str | None = typer.Option(None, "--loss", help="full (default: whole-vocabulary fp32 logits), chunked "
                                    "(torchtune CEWithChunkedOutputLoss) or fused (Liger / Cut Cross-Entropy / "
                                    "LinearCrossEntropyLoss: no full logits)."),
    compile_model: bool | None = typer.Option(None, "--compile/--no-compile", help="torch.compile: fused norms and "
                                              "SwiGLU keep fewer tensors; with --loss chunked no fp32 chunk."),
    activation_offloading: bool | None = typer.Option(None, "--activation-offloading/--no-activation-offloading",
                                                      help="Saved activations moved to CPU (torchtune "
                                                      "enable_activation_offloading); one layer's stay."),
    optimizer_in_backward: bool | None = typer.Option(None, "--optimizer-in-backward/--no-optimizer-in-backward",
                                                      help="Optimizer step fused into backward (torchtune "
                                                      "optimizer_in_bwd): one gradient alive, no step temporaries."),
    packed: bool | None = typer.Option(None, "--packed/--no-packed", help="Sample packing: every sequence is "
                                       "--seq-len real tokens (the estimate assumes full sequences either way)."),
    varying_lengths: bool | None = typer.Option(None, "--varying-lengths/--fixed-lengths",
                                                help="Batches padded to their own longest sequence (no packing), so "
                                                "lengths vary step to step: the caching allocator reserves more "
                                                "(measured in native mode). Default: fixed (padded to --seq-len)."),
    double_quant: bool | None = typer.Option(None, "--double-quant/--no-double-quant",
                                             help="QLoRA absmax double quantization (default on)."),
    bitsandbytes: str | None = typer.Option(None, "--bitsandbytes", help="Installed bitsandbytes version (0.45)."),
    peft: str | None = typer.Option(None, "--peft", help="Installed PEFT version (0.13); before 0.12 adapters "
                                    "take the base weight's dtype."),
    precision: str | None = typer.Option(None, "--precision", help="bf16, bf16-mixed (default), fp16-mixed, fp32."),
    micro_batch: int | None = typer.Option(None, "--micro-batch", help="Default 1."),
    seq_len: int | None = typer.Option(None, "--seq-len", help="Default 2048."),
    grad_checkpointing: bool | None = typer.Option(None, "--grad-checkpointing/--no-grad-checkpointing"),
    checkpoint_impl: str | None = typer.Option(
        None, "--checkpoint-impl", help="hf-reentrant (transformers' gradient_checkpointing, default), "
        "hf-non-reentrant, or fsdp-wrapper (checkpoint inside each FSDP unit: accelerate's "
        "fsdp_activation_checkpointing, torchtune)."),
    zero: int | None = typer.Option(None, "--zero", help="DeepSpeed ZeRO stage 0-3 (default 0)."),
    fsdp: str | None = typer.Option(None, "--fsdp", help="full, hybrid, grad-op or none (default)."),
    offload: str | None = typer.Option(None, "--offload", help="optimizer, params or none (default)."),
    gpus: int | None = typer.Option(None, "--gpus", help="Default 1."),
    tensor_parallel: int | None = typer.Option(None, "--tensor-parallel"),
    pipeline_parallel: int | None = typer.Option(None, "--pipeline-parallel"),
    sequence_parallel: bool | None = typer.Option(None, "--sequence-parallel/--no-sequence-parallel",
                                                  help="Megatron: split norms/dropouts along the sequence over the "
                                                  "tensor-parallel ranks (needs --tensor-parallel >= 2)."),
    distributed_optimizer: bool | None = typer.Option(None, "--distributed-optimizer/--no-distributed-optimizer",
                                                      help="Megatron: shard fp32 master weights and Adam states "
                                                      "over the data-parallel ranks (6 + 12/d bytes/param)."),
    recompute: str | None = typer.Option(None, "--recompute", help="Megatron: none (default), selective "
                                         "(attention scores recomputed) or full (layer inputs kept)."),
    pp_schedule: str | None = typer.Option(None, "--pp-schedule", help="Megatron: 1f1b (default) or interleaved."),
    virtual_stages: int | None = typer.Option(None, "--virtual-stages", help="Megatron: model chunks per pipeline "
                                              "stage for the interleaved schedule (2 or more)."),
    global_batch: int | None = typer.Option(None, "--global-batch", help="Megatron: sequences per step over all "
                                            "data-parallel ranks; micro-batches = global / (micro x data-parallel). "
                                            "Default: as many micro-batches as pipeline stages."),
    attention: str | None = typer.Option(None, "--attention", help="Megatron: fused (flash/cuDNN via Transformer "
                                         "Engine, default) or unfused (local implementation: scores kept)."),
    fused_adam: bool | None = typer.Option(None, "--fused-adam/--no-fused-adam",
                                           help="A fused AdamW kernel (Megatron's FusedAdam, default there; "
                                           "torch.optim.AdamW(fused=True)): no step temporary. Default elsewhere: "
                                           "torch's foreach step with a parameter-sized temporary."),
    megatron_core: str | None = typer.Option(None, "--megatron-core", help="Megatron: installed megatron-core "
                                             "version (0.13); before 0.8 the loss keeps a second fp32 logits copy."),
    config: list[Path] = typer.Option([], "--config", help="DeepSpeed JSON, accelerate YAML, FSDP config, "
                                      "torchtune recipe YAML, axolotl YAML or a Megatron-LM argument list file."),
    target_profile: str | None = typer.Option(None, "--target-profile"),
    workspace_files: list[Path] = typer.Option([], "--workspace-file", help=WORKSPACE_FILE_HELP),
    torch_version: str | None = typer.Option(None, "--torch-version", help=TORCH_HELP),
    cuda_version: str | None = typer.Option(None, "--cuda-version", help=CUDA_HELP),
    check: bool = typer.Option(False, "--check", help=CHECK_HELP),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Predict rank-local training memory per phase (load, forward, backward, optimizer step).

    Settings come from the defaults, then each --config file in order, then the options typed here.
    """
    from fakegpu.estimate.training import TrainingOptions
    from fakegpu.estimate.training import plan_training as run
    from fakegpu.estimate.training_config import merge_config_files

    typed = {
        "method": method, "lora_rank": lora_rank, "lora_targets": lora_targets, "lora_dropout": lora_dropout,
        "optimizer": optimizer, "framework": framework, "double_quant": double_quant, "bitsandbytes": bitsandbytes,
        "peft": peft, "precision": precision, "micro_batch": micro_batch, "seq_len": seq_len,
        "grad_checkpointing": grad_checkpointing, "checkpoint_impl": checkpoint_impl, "zero": zero, "fsdp": fsdp,
        "offload": offload, "gpus": gpus,
        "tensor_parallel": tensor_parallel, "pipeline_parallel": pipeline_parallel,
        "sequence_parallel": sequence_parallel, "distributed_optimizer": distributed_optimizer,
        "recompute": recompute, "pp_schedule": pp_schedule, "virtual_stages": virtual_stages,
        "global_batch": global_batch, "attention": attention, "fused_adam": fused_adam,
        "megatron_core": megatron_core, "dora": dora, "virtual_tokens": virtual_tokens, "loss": loss,
        "compile": compile_model, "activation_offloading": activation_offloading,
        "optimizer_in_backward": optimizer_in_backward, "packed": packed, "varying_lengths": varying_lengths,
    }
    typed = {k: v for k, v in typed.items() if v is not None}
    try:
        source = given_path(model_dir, "--model-dir", MODEL_DIR_ACCEPTED)
        notes: list[str] = []
        settings = merge_config_files(config, typed, notes)
        report = run(source, TrainingOptions(**settings), target=target_profile, workspace_files=workspace_files,
                     torch_version=torch_version, cuda_version=cuda_version, config_notes=notes)
    except FakeGPUError as exc:
        raise fail("plan-training", exc, as_json) from exc

    def render(r: dict) -> None:
        m = r["model"]
        typer.echo(f"{m['model_type']}: {m['parameter_count']:,} parameters, {r['trainable_parameters']:,} trainable; "
                   f"rank-local view of {r['parallelism']['gpus']} GPU(s)")
        typer.echo(table(_phase_rows(r["phases"]), ["PHASE", "ALLOCATED", "RESERVED", "NVIDIA-SMI", "COMPONENTS"]))
        pk = r["peak"]  # run-wide maxima; the phase named is where reserved memory peaks
        typer.echo(f"peak: {human_bytes(pk['max_memory_allocated'])} allocated, "
                   f"{human_bytes(pk['max_memory_reserved'])} reserved (reserved peaks in {pk['phase']})")
        if "megatron" in r:
            _print_megatron(r["megatron"])
        _print_target(r["target"], (("max_micro_batch", "largest micro-batch"),))
        o = r["options"]
        switched = [k for k in ("loss", "compile", "activation_offloading", "optimizer_in_backward") if o.get(k) not in
                    (None, False, "full")]
        for key in switched:
            typer.echo(f"assumed {key.replace('_', ' ')}: {r['assumptions']['recipe'][key]}")
        for note in r["notes"] + r["assumptions"]["config_notes"]:
            typer.echo(f"note: {note}")

    _finish("plan-training", report, check, as_json, render)


@calibrate_app.command("compare")
def calibrate_compare(
    prediction: Path = typer.Argument(..., help="estimate-llm or plan-training --json output."),
    observation: Path = typer.Argument(..., help="Measured numbers (fakegpu.observation/v1)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Per-phase signed and absolute error of a prediction, and the safety margin to add."""
    from fakegpu.estimate.calibrate import compare

    try:
        report = compare(prediction, observation)
    except FakeGPUError as exc:
        raise fail("calibrate compare", exc, as_json) from exc
    if as_json:
        emit_json("calibrate compare", report)
        return
    rows = [(r["phase"], r["metric"], human_bytes(r["predicted_bytes"]), human_bytes(r["observed_bytes"]),
             f"{r['signed_error'] * 100:+.2f}%", f"{r['abs_error'] * 100:.2f}%") for r in report["rows"]]
    typer.echo(table(rows, ["PHASE", "METRIC", "PREDICTED", "OBSERVED", "SIGNED", "ABS"]))
    typer.echo(f"\nrecommended safety margin: {report['recommended_safety_margin'] * 100:.1f}%")


def plan_serving(
    model_dir: str = typer.Option(..., "--model-dir", metavar="PATH", help="Model folder (config.json + safetensors "
                                  "headers), a .safetensors file or an index json; a folder with only config.json is "
                                  "sized from the config's shapes."),
    profile: str = typer.Option(..., "--profile", help="The GPU each rank runs on (catalog profile: h100, a100, l4)."),
    tensor_parallel: int = typer.Option(1, "--tensor-parallel", help="vLLM --tensor-parallel-size; the plan is "
                                        "for one rank."),
    gpu_memory_utilization: float = typer.Option(0.9, "--gpu-memory-utilization",
                                                 help="Share of the GPU's memory vLLM may use, in (0, 1]."),
    max_model_len: int | None = typer.Option(None, "--max-model-len", help="Default: the model's "
                                             "max_position_embeddings."),
    max_num_seqs: int | None = typer.Option(None, "--max-num-seqs", help="Default: vLLM's (1024 on >=70 GiB GPUs "
                                            "from 0.10, else 256)."),
    max_num_batched_tokens: int | None = typer.Option(
        None, "--max-num-batched-tokens", help="Tokens in the profile run. Default: vLLM's (serve: 8192 on >=70 GiB "
        "GPUs, else 2048; --entrypoint llm: 16384 / 8192; V0: max(max_model_len, 2048))."),
    kv_cache_dtype: str = typer.Option("auto", "--kv-cache-dtype", help="auto (the model dtype), fp8, fp8_e4m3 "
                                       "or fp8_e5m2: fp8 halves the bytes per token."),
    block_size: int = typer.Option(16, "--block-size", help="Tokens per KV block: 1, 8, 16, 32, 64 or 128."),
    enforce_eager: bool = typer.Option(False, "--enforce-eager", help="No CUDA graphs."),
    dtype: str = typer.Option("auto", "--dtype", help="auto (config's torch_dtype; float32 served in 16 bits), "
                              "bfloat16, float16, float32."),
    quantization: str | None = typer.Option(None, "--quantization", help="fp8 (online, for an unquantized "
                                            "checkpoint) or the checkpoint's own method; default: what the "
                                            "checkpoint's config says."),
    prefix_caching: bool = typer.Option(True, "--enable-prefix-caching/--no-enable-prefix-caching",
                                        help="Recorded only: prefix caching does not change start-up capacity."),
    entrypoint: str = typer.Option("serve", "--entrypoint", help="serve (`vllm serve`) or llm (the offline LLM "
                                   "class): their scheduler defaults differ."),
    vllm_version: str = typer.Option("0.21", "--vllm-version", help="vLLM release to plan for (0.6 and later): "
                                     "before 0.8 the V0 engine; from 0.21 CUDA graphs count in the budget."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """What vLLM prints at start-up for this model, GPU and flags: weights, KV-cache memory, blocks, concurrency.

    Exits 3 when vLLM would refuse to start (the KV cache cannot hold one max_model_len request).
    """
    from fakegpu.estimate.serving import ServingOptions
    from fakegpu.estimate.serving import plan_serving as run

    options = ServingOptions(tensor_parallel, gpu_memory_utilization, max_model_len, max_num_seqs,
                             max_num_batched_tokens, kv_cache_dtype, block_size, enforce_eager, dtype, quantization,
                             prefix_caching, entrypoint, vllm_version)
    try:
        report = run(given_path(model_dir, "--model-dir", MODEL_DIR_ACCEPTED), options, target=profile)
    except FakeGPUError as exc:
        raise fail("plan-serving", exc, as_json) from exc
    code = EXIT_OK if report["kv_cache"]["starts"] else EXIT_CHECK_FAILED
    if as_json:
        emit_json("plan-serving", report, code)
    else:
        _render_serving(report)
    if code:
        raise typer.Exit(code)


def _render_serving(r: dict) -> None:
    s, b, kv = r["setup"], r["budget"], r["kv_cache"]
    typer.echo(f"{r['model']['model_type']} on {s['target_name']} ({s['target']}), tensor_parallel="
               f"{s['tensor_parallel']}, vLLM {s['vllm_version']} ({s['engine'].upper()}), dtype {r['model']['dtype']}")
    for line in r["startup_log"]:
        typer.echo(f"  {line}")
    graphs = "in budget" if b["cuda_graphs_in_budget"] else "beyond budget"
    rows = [
        ("total GPU memory", human_bytes(b["total_gpu_memory_bytes"]), ""),
        ("requested", human_bytes(b["requested_bytes"]), f"x {b['gpu_memory_utilization']}"),
        ("weights (per rank)", human_bytes(b["weights_bytes"]),
         ", ".join(f"{k}={human_bytes(v)}" for k, v in b["weights"].items() if v)),
        ("activation peak", human_bytes(b["activation_peak_bytes"]),
         f"forward={human_bytes(b['activation']['forward_bytes'])}, "
         f"sampler={human_bytes(b['activation']['sampler_bytes'])} ({b['activation']['profile_requests']} requests)"),
        ("non-torch", human_bytes(b["non_torch_bytes"]), ""),
        ("CUDA graphs", human_bytes(b["cuda_graph_bytes"]),
         f"{len(b['cuda_graph_capture_sizes']['piecewise'])} piecewise + "
         f"{len(b['cuda_graph_capture_sizes']['full'])} full, {graphs}"),
        ("available KV cache", human_bytes(b["available_kv_cache_bytes"]) if b["available_kv_cache_bytes"] >= 0
         else "-" + human_bytes(-b["available_kv_cache_bytes"]),
         f"{kv['num_gpu_blocks']} blocks x {kv['spec']['block_size']} tokens, "
         f"{kv['spec']['bytes_per_token']:,.0f} B/token ({kv['spec']['kind']})"),
    ]
    typer.echo(table(rows, ["TERM", "BYTES", "DETAIL"]))
    if not kv["starts"] and kv["largest_max_model_len"]:
        typer.echo(f"\nvLLM would refuse to start; the largest max_model_len that fits is "
                   f"{kv['largest_max_model_len']}")
    for line in r["assumptions"]:
        typer.echo(f"assumption: {line}")
    for note in r["notes"]:
        typer.echo(f"note: {note}")
