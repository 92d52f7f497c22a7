"""README's install works on a stock Debian/Ubuntu Python (PEP 668: pip
refuses to install outside a virtual environment there), and .ci/run
installs the way README says."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


def _install_block():
    section = _read("README.md").split("## Install", 1)[1]
    return re.search(r"```\n(.*?)```", section, re.S).group(1)


def test_readmes_install_makes_a_virtual_environment_before_pip():
    block = _install_block()
    venv, pip = block.find("-m venv"), block.find("pip install")
    assert 0 <= venv < pip, block
    assert ". .venv/bin/activate" in block


def test_ci_installs_as_the_readme_says():
    ci = _read(".ci", "run")
    venv, act, pip = ci.find("python3 -m venv"), ci.find(". .venv/bin/activate"), ci.find("pip install -q -e '.[test]'")
    assert 0 <= venv < act < pip, "the CI makes and activates the venv before installing"
    assert "pip install -q -e '.[test]'" in ci and "python3 -m pip install -e '.[test]'" in _install_block()
