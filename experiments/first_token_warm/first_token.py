"""How soon a new process generating with lamina has its first token: cold (empty caches), then
warm (a second process sharing the first's cache directory: the program cache, the capture cache
and the cubins on disk). Each process builds TinyLlama-1.1B (bf16, random weights) on the GPU,
replaces ``model.forward`` by ``torch.compile(model.forward, backend="lamina",
mode="reduce-overhead")`` and calls ``model.generate`` with a static cache for a 128-token prompt,
timed from the start of the process (before ``import torch``) to the first new token. Run on a GPU:
``python experiments/first_token_warm/first_token.py [--model tinyllama] [--layers N]``; writes
``MODEL.json`` under ``$OUT`` (or here)."""
import time

STARTED = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import torch  # noqa: E402


def one_process(model_name: str, layers: int | None, prompt: int) -> dict:
    """Import, build, compile and generate one token in this process; the time of each part."""
    imported = time.perf_counter()
    from lamina.models import build_model, model_config

    config = model_config(model_name)
    model = build_model(config, num_layers=layers, dtype=torch.bfloat16, device="cuda", seed=0).model
    ids = torch.randint(0, config.vocab_size, (1, prompt), generator=torch.Generator().manual_seed(0)).cuda()
    built = time.perf_counter()
    model.forward = torch.compile(model.forward, backend="lamina", mode="reduce-overhead")
    with torch.no_grad():
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=1, min_new_tokens=1,
                       do_sample=False, cache_implementation="static", pad_token_id=0, disable_compile=True)
    torch.cuda.synchronize()
    done = time.perf_counter()
    return {"process_start_to_first_token_s": round(done - STARTED, 2),
            "importing_torch_s": round(imported - STARTED, 2),
            "building_the_model_s": round(built - imported, 2),
            "compile_and_first_token_s": round(done - built, 2)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--phase", action="store_true")
    parser.add_argument("--model", default="tinyllama")
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--prompt", type=int, default=128)
    args = parser.parse_args()
    if args.phase:
        print(json.dumps(one_process(args.model, args.layers, args.prompt)))
        return
    results = {"command": "python experiments/first_token_warm/first_token.py " + " ".join(sys.argv[1:]),
               "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    with tempfile.TemporaryDirectory(prefix="lamina-cache-") as cache:
        env = {**os.environ, "LAMINA_CACHE_DIR": cache}
        env.pop("LAMINA_PROGRAM_CACHE", None)
        for phase in ("cold", "warm"):
            command = [sys.executable, __file__, "--phase", "--model", args.model, "--prompt", str(args.prompt)]
            command += ["--layers", str(args.layers)] if args.layers else []
            out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
            results[phase] = json.loads(out.strip().splitlines()[-1])
            print(phase, results[phase], flush=True)
    name = f"{args.model}_{args.layers}.json" if args.layers else f"{args.model}.json"
    with open(os.path.join(os.environ.get("OUT", os.path.dirname(__file__)), name), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
