# Type stub for the cffi-generated extension: cffi objects are dynamically typed.
from typing import Any

ffi: Any
lib: Any
