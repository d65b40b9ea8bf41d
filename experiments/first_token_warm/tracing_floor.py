"""What torch.compile costs before any backend runs: Dynamo's trace of TinyLlama's forward pass
(``backend="eager"``) and Dynamo's with AOTAutograd's (``backend="aot_eager"``, the graph lamina
receives), each as its first call's time beyond a later call's. The floor under any backend's first
token in a new process. ``python experiments/first_token_warm/tracing_floor.py [--device cuda]``."""
import argparse
import time

import torch

from lamina.models import build_model, model_config


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--prompt", type=int, default=128)
    args = parser.parse_args()
    config = model_config("tinyllama")
    model = build_model(config, dtype=torch.bfloat16, device=args.device, seed=0).model
    ids = torch.randint(0, config.vocab_size, (1, args.prompt), device=args.device)
    for backend in ("eager", "aot_eager"):
        torch._dynamo.reset()
        forward = torch.compile(model.forward, backend=backend)
        times = []
        for _ in range(2):
            started = time.perf_counter()
            with torch.no_grad():
                forward(input_ids=ids)
            if args.device != "cpu":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - started)
        print(f"{backend:9s} first call {times[0]:.2f} s, a later call {times[1]:.2f} s: "
              f"tracing {times[0] - times[1]:.2f} s", flush=True)


if __name__ == "__main__":
    main()
