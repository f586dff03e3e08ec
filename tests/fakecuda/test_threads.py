"""Threads a program starts while fakecuda is active (threads.py): they see the fake devices and their ops are
charged, under either charging hook; a thread that outlives deactivate() goes on with plain torch."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.fakecuda.test_workspace import _per_call_workspaces

pytestmark = pytest.mark.torch


@pytest.fixture(params=["cxx", "python"])
def hook(request, monkeypatch):
    if request.param == "cxx":
        from fakegpu.fakecuda import extension

        extension.build()  # (make test builds it first; here otherwise, not skipped)
    monkeypatch.setenv("FAKEGPU_FAKECUDA_HOOK", request.param)
    return request.param


def test_a_thread_started_while_active_trains_on_the_fake_device_and_is_charged(fakecuda, hook):
    torch = pytest.importorskip("torch")
    import fakegpu.fakecuda as fc
    from fakegpu.fakecuda.dispatch import ChargeHook

    fakecuda("a100:2")
    assert isinstance(fc._active["charges"], ChargeHook) == (hook == "cxx")
    before = torch.cuda.memory_allocated()
    seen: dict = {}

    def train() -> None:
        model = torch.nn.Linear(256, 256).cuda()
        x = torch.randn(64, 256, device="cuda")
        loss = model(x).relu().sum()
        seen["during"] = torch.cuda.memory_allocated() - before
        loss.backward()
        seen["devices"] = {str(t.device) for t in (model.weight, model.weight.grad, x, loss)}
        seen["is_cuda"] = model.weight.grad.is_cuda
        seen["kept"] = model  # (alive after the thread: its parameters and gradients stay charged)

    train()  # on the main thread first: what the thread must match
    on_main = dict(seen)
    del seen["kept"], on_main["kept"]
    # Before torch 2.15 cuBLAS workspaces stay allocated, one per handle, and handles are per thread: the forward's
    # on the calling thread, the backward's on autograd's device thread (one for the process). held: both of the
    # main thread's run; forward: the forward's alone, which a new thread makes again. 0 from torch 2.15.
    held = torch.cuda.memory_allocated() - before
    # while it ran: the parameters, the input, the relu's output (saved for backward) and the sum's 512-byte block
    forward = on_main["during"] - ((256 * 256 + 256) * 4 + 2 * 64 * 256 * 4 + 512)
    assert (held == 0) == (forward == 0) == _per_call_workspaces() and 0 <= forward <= held
    worker = threading.Thread(target=train)
    worker.start()
    worker.join()
    assert seen["devices"] == {"cuda:0"} and seen["is_cuda"]
    assert seen["during"] == held + on_main["during"]  # the thread's run charged as the main thread's was
    after = torch.cuda.memory_allocated() - before - held - forward
    assert after == 2 * (256 * 256 + 256) * 4  # the parameters and gradients the thread left
    del seen["kept"]
    assert torch.cuda.memory_allocated() - before == held + forward


def test_a_thread_pool_serves_requests_on_the_fake_device(fakecuda, hook):
    """A web server's pattern: requests answered on pool threads, the model loaded on the main thread."""
    torch = pytest.importorskip("torch")
    fakecuda("a100")
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 4)).cuda().eval()
    loaded = torch.cuda.memory_allocated()

    # (requests made here: the generator is one for the process, so threads seeding it would race, as on CUDA)
    requests = [torch.randn(2, 32).tolist() for _ in range(6)]

    def answer(request: list) -> tuple[str, list]:
        with torch.no_grad():
            out = model(torch.tensor(request, device="cuda"))
        return str(out.device), out.cpu().tolist()

    on_main = [answer(request)[1] for request in requests]
    # what a thread keeps after its GEMMs: its cuBLAS workspace before torch 2.15 (handles are per thread), else 0
    held = torch.cuda.memory_allocated() - loaded
    assert (held == 0) == _per_call_workspaces() and held >= 0
    threads: set[int] = set()

    def served(request: list) -> tuple[str, list]:
        threads.add(threading.get_ident())
        return answer(request)

    with ThreadPoolExecutor(max_workers=2) as pool:
        answers = list(pool.map(served, requests))
    assert {device for device, _ in answers} == {"cuda:0"}
    assert [out for _, out in answers] == on_main
    # every request's tensors freed; each pool thread's workspace kept where one is held
    assert torch.cuda.memory_allocated() - loaded == held * (1 + len(threads))


def test_streaming_generation_on_a_thread_as_transformers_documents_it(fakecuda):
    """transformers' TextIteratorStreamer: generate() runs on a Thread, the main thread reads the text as it
    comes. A tiny GPT-2 and an in-memory word-level tokenizer (nothing downloaded)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    fakecuda("a100")
    words = ["[UNK]", "[EOS]"] + [f"w{i}" for i in range(62)]
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.decoder = tokenizers.decoders.WordPiece()  # (joins the words with spaces)
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="[EOS]")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=len(words), n_positions=64, n_embd=32, n_layer=2, n_head=2,
                                     eos_token_id=1, bos_token_id=1, pad_token_id=1)
    model = transformers.GPT2LMHeadModel(config).cuda().eval()
    inputs = tokenizer(["w1 w2 w3"], return_tensors="pt").to("cuda")
    options = dict(max_new_tokens=12, min_new_tokens=12, do_sample=False)

    streamer = transformers.TextIteratorStreamer(tokenizer, skip_prompt=True)
    failed: list[BaseException] = []

    def generate() -> None:
        try:
            model.generate(**inputs, streamer=streamer, **options)
        except BaseException as exc:  # (re-raised below: a thread's exception would otherwise only be printed)
            failed.append(exc)
            streamer.end()

    worker = threading.Thread(target=generate)
    worker.start()
    streamed = "".join(streamer)
    worker.join()
    assert not failed, failed
    reference = model.generate(**inputs, **options)
    assert reference.device.type == "cuda"
    assert streamed.split() == tokenizer.decode(reference[0, 3:]).split() and len(streamed.split()) == 12


def test_a_thread_that_outlives_deactivate_goes_on_with_plain_torch(fakecuda, hook):
    torch = pytest.importorskip("torch")
    import fakegpu.fakecuda as fc

    fakecuda("a100")
    go, out = threading.Event(), {}

    def late() -> None:
        out["fake"] = str(torch.zeros(1, device="cuda").device)
        go.wait(timeout=60)
        x = torch.ones(4) * 3  # after deactivate(): plain CPU torch, nothing charged, nothing raised
        out["after"] = (str(x.device), x.sum().item(), type(x) is torch.Tensor)
        try:
            torch.zeros(1, device="cuda")
        except (RuntimeError, AssertionError) as exc:  # the CUDA build's own answer without a GPU
            out["cuda"] = type(exc).__name__

    worker = threading.Thread(target=late)
    worker.start()
    fc.deactivate()
    go.set()
    worker.join()
    assert out["fake"] == "cuda:0"
    assert out["after"] == ("cpu", 12.0, True) and "cuda" in out
    # and a thread started now runs plain torch from the start
    fresh: dict = {}
    again = threading.Thread(target=lambda: fresh.update(x=str((torch.ones(2) + 1).device)))
    again.start()
    again.join()
    assert fresh == {"x": "cpu"}


def test_threads_allocating_and_freeing_at_once_leave_the_allocator_whole(fakecuda, hook, monkeypatch):
    """Three threads allocate and drop tensors of every pool's sizes at once, switching as often as the interpreter
    can (the Python model's pools were corrupted so: KeyError in BlockPool.remove, inside deaths' callbacks, where
    nothing but stderr sees it). Afterwards nothing is allocated or active, and empty_cache returns every segment."""
    import random
    import sys

    torch = pytest.importorskip("torch")
    fakecuda("a100")
    base = torch.cuda.memory_allocated()
    unraisable: list = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    errors: list[BaseException] = []

    def churn(seed: int) -> None:
        rng = random.Random(seed)
        kept = []
        try:
            for _ in range(1500):
                kept.append(torch.empty(rng.choice([1, 100, 1000, 70000, 300000, 1 << 20]), device="cuda"))
                if len(kept) > 20 or rng.random() < 0.4:
                    kept.pop(rng.randrange(len(kept)))
        except BaseException as exc:
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        workers = [threading.Thread(target=churn, args=(seed,)) for seed in range(3)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors and not unraisable, (errors, [u.exc_value for u in unraisable][:3])
    assert torch.cuda.memory_allocated() == base and torch.cuda.memory_stats()["active_bytes.all.current"] == base
    torch.cuda.empty_cache()
    assert torch.cuda.memory_reserved() == 0 and torch.cuda.memory_snapshot() == []


def test_a_thread_whose_fakecuda_entry_fails_still_starts_and_says_so():
    """Thread.start() waits until the new thread's bootstrap marks it started: an entry that raised before the
    bootstrap ran would leave start() waiting for ever."""
    from fakegpu.fakecuda import threads

    def broken():
        raise RuntimeError("no entry")

    ran: list[bool] = []
    threads.install(broken)
    try:
        with pytest.warns(RuntimeWarning, match="runs without the fake devices.*no entry"):
            worker = threading.Thread(target=lambda: ran.append(True))
            worker.start()
            worker.join(timeout=30)
    finally:
        threads.uninstall()
    assert ran == [True] and not worker.is_alive()
