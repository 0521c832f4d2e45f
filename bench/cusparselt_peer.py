#!/usr/bin/env python3
"""The peers of nm-cuda's 2:4 sparse tensor-core kernel, through PyTorch on a GPU machine.

C = A·B with A (m×k) 2:4-sparse along its rows (nv24's pattern) and B (k×n) dense, bf16:
cuSPARSELt and CUTLASS (PyTorch's semi-structured sparse tensors) and cuBLAS's dense bf16
GEMM (torch.mm), each timed with CUDA events after warm-up runs. Prints CSV in the columns of
nm-cuda's bench (`cargo run --release -p nm-cuda --example bench`), whose `nv24_sp` rows are the
same shapes: run both in one session (bench/gpu_session.sh does).

    python3 bench/cusparselt_peer.py [MxNxK ...] [--reps 50]

Useful flops are 2·m·n·k/2 (the kept half of A), as in the Rust bench's nv24 rows. Each peer is
timed twice: called from Python (what a PyTorch user gets) and replayed from a CUDA graph (the
device's time alone, comparable with the Rust bench, which launches with no per-call host work). A peer PyTorch cannot
run on this machine (no cuSPARSELt, a shape it refuses) gets a row saying why, never a number.
"""
import argparse
import sys

import torch


def shapes_of(args):
    if args.shapes:
        return [tuple(int(d) for d in s.split("x")) for s in args.shapes]
    out = [(4096, 4096, 4096)]
    for m in (256, 1024, 4096):
        for n, k in ((4096, 4096), (11008, 4096), (4096, 11008)):
            out.append((m, n, k))
    return out


def time_ms(f, reps):
    for _ in range(5):
        f()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        f()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def graph_ms(f, reps):
    """Milliseconds per call replaying `reps` calls captured in one CUDA graph: the device's
    time alone, without the host work PyTorch does per call (for cuSPARSELt, a matmul plan
    per call, about a millisecond on the first GPU session's machine, larger than the kernel)."""
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(reps):
                f()
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def two_of_four(m, k, generator):
    """A random bf16 m×k matrix keeping 2 of every 4 columns of each row (random positions)."""
    a = torch.randn(m, k, generator=generator, device="cuda").to(torch.bfloat16)
    scores = torch.rand(m, k // 4, 4, generator=generator, device="cuda")
    keep = scores.argsort(dim=-1)[..., :2]
    mask = torch.zeros(m, k // 4, 4, dtype=torch.bool, device="cuda")
    mask.scatter_(-1, keep, True)
    return a * mask.reshape(m, k)


def sparse_kinds():
    """(name, constructor) of the semi-structured layouts this PyTorch offers."""
    from torch.sparse import SparseSemiStructuredTensor

    kinds = []
    for name, cls in (("cusparselt", "SparseSemiStructuredTensorCUSPARSELT"),
                      ("cutlass", "SparseSemiStructuredTensorCUTLASS")):
        c = getattr(torch.sparse, cls, None)
        if c is not None:
            kinds.append((name, c.from_dense))
    if not kinds:  # older PyTorch: one class, CUTLASS forced or not
        def make(force):
            def build(a):
                SparseSemiStructuredTensor._FORCE_CUTLASS = force
                return torch.sparse.to_sparse_semi_structured(a)
            return build
        kinds = [("cusparselt", make(False)), ("cutlass", make(True))]
    return kinds


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("shapes", nargs="*")
    parser.add_argument("--reps", type=int, default=50)
    # The Rust bench's options (--patterns, --l) may come along: not this script's business.
    args, _ = parser.parse_known_args()
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        sys.exit(2)
    cusparselt = getattr(torch.backends, "cusparselt", None)
    available = cusparselt.is_available() if cusparselt else False
    version = cusparselt.version() if available else None
    print(f"# {torch.cuda.get_device_name()}; torch {torch.__version__}; cuSPARSELt "
          f"{'available, version ' + str(version) if available else 'not available'}; "
          f"{args.reps} timed runs after 5 warm-up runs")
    print("shape,pattern,sparsity,kernel,ms,useful_tflops,pct_fp32_peak,speedup_vs_cublas")
    g = torch.Generator(device="cuda").manual_seed(7)
    for m, n, k in shapes_of(args):
        a = two_of_four(m, k, g)
        b = torch.randn(k, n, generator=g, device="cuda").to(torch.bfloat16)
        dense_ms = time_ms(lambda: torch.mm(a, b), args.reps)
        useful = m * n * k  # 2·m·n·k/2
        label = f"{m}x{n}x{k},2:4 nv24,0.5"
        print(f"{label},torch_cublas_bf16_dense,{dense_ms:.4f},{useful / dense_ms / 1e9:.2f},,1.00")
        try:
            ms = graph_ms(lambda: torch.mm(a, b), args.reps)
            print(f"{label},torch_cublas_bf16_dense (CUDA graph),{ms:.4f},{useful / ms / 1e9:.2f},,{dense_ms / ms:.2f}")
        except Exception as e:
            print(f"{label},torch_cublas_bf16_dense (CUDA graph),,,,# {type(e).__name__}: {str(e).splitlines()[0][:120]}")
        want = torch.mm(a.float(), b.float())
        for name, build in sparse_kinds():
            if name == "cusparselt" and not available:
                print(f"{label},torch_{name},,,,# cuSPARSELt not available in this PyTorch")
                continue
            try:
                a_sp = build(a)
                got = torch.mm(a_sp, b).float()
                # bf16 output: a loose check that the peer computed the product at all.
                err = (got - want).abs().max().item() / max(want.abs().max().item(), 1e-30)
                if err > 2e-2:
                    print(f"{label},torch_{name},,,,# wrong result (max relative error {err:.3g})")
                    continue
                ms = time_ms(lambda: torch.mm(a_sp, b), args.reps)
                print(f"{label},torch_{name},{ms:.4f},{useful / ms / 1e9:.2f},,{dense_ms / ms:.2f}")
                ms = graph_ms(lambda: torch.mm(a_sp, b), args.reps)
                print(f"{label},torch_{name} (CUDA graph),{ms:.4f},{useful / ms / 1e9:.2f},,{dense_ms / ms:.2f}")
            except Exception as e:  # a shape or dtype this PyTorch refuses: say so
                print(f"{label},torch_{name},,,,# {type(e).__name__}: {str(e).splitlines()[0][:120]}")


if __name__ == "__main__":
    main()
