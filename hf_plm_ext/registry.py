"""The one table of model families and the Auto classes each one serves.

``import hf_plm_ext`` calls :func:`register_families`. A family is a folder of ``modeling/`` whose ``__init__.py``
names its classes in ``AUTO_CLASSES`` (see CONTRIBUTING.md); the registry finds the folders, and nothing else
registers classes.
"""

import functools
import importlib
import pkgutil
from collections import OrderedDict

import transformers
from transformers import AutoConfig
from transformers.pipelines import PIPELINE_REGISTRY
from transformers.models.auto.auto_factory import _BaseAutoModelClass, _LazyAutoMapping
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

import hf_plm_ext.modeling


class AutoModelForSpellingCorrection(_BaseAutoModelClass):
    """The Auto class of spelling-correction models (a task transformers has none for), made by transformers' own
    Auto factory: ``AutoModelForSpellingCorrection.from_pretrained(path)`` / ``.from_config(config)``, after
    ``import hf_plm_ext``. A saved checkpoint's ``auto_map`` names it too, so where hf-plm-ext is not installed
    ``transformers.dynamic_module_utils.get_class_from_dynamic_module(config.auto_map[
    "AutoModelForSpellingCorrection"], path)`` gives the class, and ``AutoModelForMaskedLM`` loads the correction
    head alone."""

    _model_mapping = _LazyAutoMapping(CONFIG_MAPPING_NAMES, OrderedDict())


# Auto classes of this package, for tasks transformers has no Auto class for
PACKAGE_AUTO_CLASSES = {"AutoModelForSpellingCorrection": AutoModelForSpellingCorrection}


def auto_class(name: str):
    """transformers' Auto class called ``name``, or this package's."""
    return getattr(transformers, name, None) or PACKAGE_AUTO_CLASSES[name]


@functools.cache
def family_folders() -> tuple:
    """The family folders under ``hf_plm_ext.modeling`` (``modeling/`` in the checkout), by name; found once (the
    adapters read the families' declarations for every module they wrap)."""
    return tuple(importlib.import_module(f"{hf_plm_ext.modeling.__name__}.{folder.name}")
                 for folder in pkgutil.iter_modules(hf_plm_ext.modeling.__path__) if folder.ispkg)


def spelling_correction() -> dict:
    """The ``SPELLING_CORRECTION`` declaration of the family folder that has one (``task``, ``pipeline``, ``head``,
    ``starts_from``: see ``modeling/macbert/__init__.py``)."""
    declared = [folder.SPELLING_CORRECTION for folder in family_folders() if hasattr(folder, "SPELLING_CORRECTION")]
    if len(declared) != 1:
        raise RuntimeError(f"one family folder declares SPELLING_CORRECTION, found {len(declared)}")
    return declared[0]


# config class -> {Auto class name: model class}, from each folder's AUTO_CLASSES
FAMILIES = {folder.AUTO_CLASSES["AutoConfig"]: {auto: cls for auto, cls in folder.AUTO_CLASSES.items()
                                                if auto != "AutoConfig"}
            for folder in family_folders()}


def _code_path(cls) -> str:
    """``module_file.ClassName`` as ``auto_map`` names it (the family folder is copied flat)."""
    return f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}"


def family_auto_map(config_class) -> dict:
    models = FAMILIES[config_class]
    return {"AutoConfig": _code_path(config_class), **{auto: _code_path(m) for auto, m in models.items()}}


def register_families() -> None:
    """Register every family with the Auto classes, in-process and for ``save_pretrained``.

    In-process: ``AutoConfig``/``AutoModel*`` resolve the family's ``model_type`` without
    ``trust_remote_code``. On save: each class is registered for its Auto class, so
    ``save_pretrained`` copies the family's code next to the weights, and the config carries
    the family's complete ``auto_map`` for loading with ``trust_remote_code=True`` elsewhere.
    """
    for config_class, models in FAMILIES.items():
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        config_class.register_for_auto_class("AutoConfig")
        config_class._family_auto_map = family_auto_map(config_class)
        for auto_name, model_class in models.items():
            auto_class(auto_name).register(config_class, model_class, exist_ok=True)
            if auto_name in PACKAGE_AUTO_CLASSES:  # (register_for_auto_class accepts transformers' names only)
                model_class._auto_class = auto_name
            else:
                model_class.register_for_auto_class(auto_name)
    correction = spelling_correction()
    if correction["task"] not in PIPELINE_REGISTRY.get_supported_tasks():
        PIPELINE_REGISTRY.register_pipeline(correction["task"], pipeline_class=correction["pipeline"],
                                            pt_model=AutoModelForSpellingCorrection, type="text")


def supported_model_types() -> list[str]:
    return [config_class.model_type for config_class in FAMILIES]
