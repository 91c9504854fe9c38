import os
import sys
import tempfile

# One kernel cache per test run: kernels are shared across tests, never with a user's cache.
os.environ.setdefault("SEASTAR_CACHE_DIR", tempfile.mkdtemp(prefix="seastar-test-cache-"))
os.environ.pop("SEASTAR_NO_JIT", None)
sys.path.insert(0, os.path.dirname(__file__))
