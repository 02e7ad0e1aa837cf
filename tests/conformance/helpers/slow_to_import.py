"""A module that takes seconds to import (a vendor library loading its kernels): a worker that
imports it starts slowly, and its first case's timeout must not count the start."""

import time

time.sleep(4)
