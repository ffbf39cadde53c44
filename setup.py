"""setuptools glue for the cffi out-of-line build of radix/_radix (cffi_modules
cannot be expressed in pyproject.toml). Everything else lives in pyproject.toml."""

from setuptools import setup

setup(cffi_modules=["radix/build_radix.py:ffibuilder"])
