"""Push a checkpoint folder written by hf-plm-ext to a Hub repository, with its code and model card.

One commit holds every file of the folder that a stranger needs — safetensors weights,
``config.json`` (with the family's complete ``auto_map``), the family's ``*.py`` code, the
tokenizer, ``eval_results.json`` / ``pretrain_results.json`` and the JSON training arguments —
plus ``README.md``: the folder's own, or the card rendered from the run
(:func:`hf_plm_ext.hub.cards.render_card`). Pickles are never pushed. The local folder is
only read. ``HF_ENDPOINT`` points ``huggingface_hub`` at another Hub; the token comes from
``HF_TOKEN`` or ``hf auth login``'s cache.

An adapter folder (PEFT's ``adapter_config.json`` + ``adapter_model.safetensors``) is pushed
adapter-only; its ``base_model_name_or_path`` must name a Hub repository (``--base-model``
replaces a local path in the pushed copy), so that PEFT can fetch the base for a stranger.
"""

import json
from pathlib import Path

import httpx2  # huggingface_hub's HTTP client
from huggingface_hub import CommitOperationAdd, HfApi, get_token
from huggingface_hub.errors import HfHubHTTPError, HFValidationError
from huggingface_hub.utils import validate_repo_id

from hf_plm_ext.errors import UserInputError
from hf_plm_ext.hub.cards import is_local_path, read_json, render_card

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")


def files_to_push(directory: Path) -> list[Path]:
    """The folder's top-level files except hidden ones and pickles; refuses a folder that is not a checkpoint."""
    if not directory.is_dir():
        raise UserInputError(f"checkpoint directory not found: {directory}")
    if (directory / "adapter_config.json").is_file():
        if not (directory / "adapter_model.safetensors").is_file():
            raise UserInputError(f"{directory} holds adapter_config.json but no adapter_model.safetensors "
                                 f"(only safetensors are pushed)")
    elif not (directory / "config.json").is_file():
        raise UserInputError(f"{directory} is not a checkpoint folder (no config.json) nor an adapter folder "
                             f"(no adapter_config.json)")
    elif not any(directory.glob("*.safetensors")):
        raise UserInputError(f"{directory} holds no safetensors weights (only safetensors are pushed)")
    return sorted(p for p in directory.iterdir()
                  if p.is_file() and not p.name.startswith(".") and p.suffix not in PICKLE_SUFFIXES)


def check_repo_id(repo_id: str) -> None:
    try:
        validate_repo_id(repo_id)
    except HFValidationError as err:
        raise UserInputError(f"invalid --repo-id {repo_id!r}: {str(err).splitlines()[0]}") from None
    if "/" not in repo_id:
        raise UserInputError(f"invalid --repo-id {repo_id!r}: give it as namespace/name (your user or organisation)")


def adapter_config_for_hub(directory: Path, base_model) -> bytes:
    """The adapter's config as pushed: ``base_model_name_or_path`` a Hub repository id."""
    config = read_json(directory / "adapter_config.json")
    base = base_model or config.get("base_model_name_or_path")
    if not base or is_local_path(base):
        raise UserInputError(f"the adapter in {directory} was trained on {base or 'an unnamed base model'!r}, "
                             f"which a stranger cannot download: push the base model first (hf-plm-ext push "
                             f"BASE_DIR --repo-id NAMESPACE/BASE) and pass --base-model NAMESPACE/BASE")
    try:
        validate_repo_id(base)
    except HFValidationError as err:
        raise UserInputError(f"invalid --base-model {base!r}: {str(err).splitlines()[0]}") from None
    config["base_model_name_or_path"] = base
    return (json.dumps(config, indent=2, sort_keys=True) + "\n").encode()


def push_checkpoint(directory, repo_id, private=False, revision=None, create_pr=False, language=None, license=None,
                    base_model=None, datasets=None):
    """Create ``repo_id`` if needed and commit the checkpoint in ``directory`` to it; return the ``CommitInfo``."""
    directory = Path(directory)
    files = files_to_push(directory)
    check_repo_id(repo_id)
    replaced = {}
    if (directory / "adapter_config.json").is_file():
        replaced["adapter_config.json"] = adapter_config_for_hub(directory, base_model)
    token = get_token()
    if token is None:
        raise UserInputError("no Hugging Face token: set HF_TOKEN or run `hf auth login` (a token with write access)")
    readme = directory / "README.md"
    # a card hf-plm-ext wrote and nobody edited is rendered again, for the repo; an edited one goes up as it is
    ours = readme.is_file() and readme.read_text(encoding="utf-8") == str(render_card(directory))
    card = None if readme.is_file() and not ours else render_card(directory, repo_id=repo_id, language=language,
                                                                   license=license, base_model=base_model,
                                                                   datasets=datasets)
    operations = [CommitOperationAdd(path_in_repo=f.name, path_or_fileobj=replaced.get(f.name, str(f)))
                  for f in files if not (card is not None and f.name == "README.md")]
    if card is not None:
        operations.append(CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=str(card).encode()))
    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True)
        if revision is not None:
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        return api.create_commit(repo_id, operations, revision=revision, create_pr=create_pr,
                                 commit_message=f"Upload {directory.name} with hf-plm-ext")
    except httpx2.TransportError as err:
        raise UserInputError(f"the connection to {api.endpoint} failed while pushing {directory} to {repo_id} "
                             f"({type(err).__name__}: {err}); nothing was committed, the local folder is unchanged; "
                             f"run the command again") from None
    except HfHubHTTPError as err:
        raise UserInputError(f"{api.endpoint} refused to push {directory} to {repo_id}: "
                             f"{str(err).splitlines()[0]}") from None
