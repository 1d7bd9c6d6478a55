"""Start skyrl 0.3.0's Tinker API server without `uv run` (workaround (c), docs reference §16.1).

skyrl's API process (skyrl.tinker.api) starts its engine subprocess with
`uv run <the parent's uv flags> --extra tinker --extra <backend> -m skyrl.tinker.engine ...`
and refuses to start unless it was itself launched by `uv run`. This launcher
replaces that command builder with "this interpreter, -m skyrl.tinker.engine,
plus the config as argv", then runs the FastAPI app under uvicorn exactly as
`python -m skyrl.tinker.api` would.

Usage (run by scripts/skyrl-cpu, with PYTHONPATH=tests/tinker/stubs JAX_PLATFORMS=cpu HF_HUB_OFFLINE=1):
  python launcher.py --base-model DIR --backend jax --database-url sqlite:///W/skyrl.db \
      --checkpoints-base W/ckpt --host 127.0.0.1 --port 8011 \
      --backend-config '{"max_lora_adapters":16,"max_lora_rank":8}'
"""

import argparse
import sys

import uvicorn

import skyrl.tinker.api as api
from skyrl.tinker import types
from skyrl.tinker.config import EngineConfig, add_model, config_to_argv
from skyrl.utils.log import get_uvicorn_log_config, logger


def _engine_cmd(_parent_cmd, engine_config):
    return [sys.executable, "-m", "skyrl.tinker.engine", *config_to_argv(engine_config)]


def _ties_embeddings(base_model: str) -> bool:
    """Whether the base model's output layer is its embedding, read as skyrl's
    engine reads it (AutoConfig of the resolved folder: a config.json without
    the key gets its architecture's default)."""
    from transformers import AutoConfig

    from skyrl.tx.utils.models import resolve_model_path

    return bool(getattr(AutoConfig.from_pretrained(resolve_model_path(base_model)), "tie_word_embeddings", False))


def _lora_trains_unembedding(base_model: str) -> bool:
    """skyrl's API keeps only `rank` and `seed` of a request's lora_config and
    builds the rest from these defaults, where `train_unembed` is False. The
    Tinker SDK (and our client) ask for True; make that skyrl's default so its
    LoRA covers lm_head as on hosted Tinker (the tiny random model's output
    head is otherwise out of the adapter's reach: see docs/rl.md).

    Only for models with their own output layer: with tied embeddings
    (SmolLM2, Qwen3-0.6B/1.7B/4B) lm_head is `embed_tokens.T`, which skyrl's
    LoRA cannot adapt, and skyrl refuses every create_model that asks for
    train_unembed ("incompatible with tie_word_embeddings"). There the
    default stays False: the adapter covers attention and MLP, and the output
    layer moves with the hidden states it reads. Returns whether it is on."""
    if _ties_embeddings(base_model):
        return False
    types.LoraConfig.model_fields["train_unembed"].default = True
    types.LoraConfig.model_rebuild(force=True)
    return True


def main() -> None:
    api._build_uv_run_cmd_engine = _engine_cmd  # looked up at call time in api.lifespan

    parser = argparse.ArgumentParser(description="skyrl 0.3.0 tinker API server, launched without uv")
    add_model(parser, EngineConfig)
    parser.add_argument("--host", type=str, default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()

    engine_config = EngineConfig.model_validate({k: v for k, v in vars(args).items() if k in EngineConfig.model_fields})
    api.app.state.engine_config = engine_config
    unembed = _lora_trains_unembedding(engine_config.base_model)
    logger.info(f"metaclaw launcher: LoRA train_unembed default {unembed} (tied embeddings: {not unembed})")
    logger.info(f"metaclaw launcher: engine command {_engine_cmd(None, engine_config)}")
    uvicorn.run(api.app, host=args.host, port=args.port, log_config=get_uvicorn_log_config())


if __name__ == "__main__":
    main()
