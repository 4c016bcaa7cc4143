"""Package discovery (the rest of the metadata is in pyproject.toml): setuptools finds every package, and the
top-level ``modeling/`` and ``hub_cards/`` folders install as ``hf_plm_ext.modeling`` and ``hf_plm_ext.hub_cards``
(CONTRIBUTING.md, "Design rules": the Hub-portable family folders stay outside the library). A new folder with an
``__init__.py`` is a package; nothing lists them by hand."""

from setuptools import find_packages, setup

INSTALLED_AS = {"modeling": "hf_plm_ext.modeling", "hub_cards": "hf_plm_ext.hub_cards"}

packages = find_packages(include=["hf_plm_ext", "hf_plm_ext.*", "hf_plm_ext_cli", "hf_plm_ext_cli.*"])
for folder, name in INSTALLED_AS.items():
    packages += [name + package[len(folder):] for package in find_packages(include=[folder, f"{folder}.*"])]

setup(packages=packages, package_dir={name: folder for folder, name in INSTALLED_AS.items()})
