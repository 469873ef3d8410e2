"""How long a test waits for what should happen soon before it fails."""

from typing import Final

# Generous: a machine busy with the suite's other workers may hold a process back for seconds.
# A passing test waits only as long as it takes; a fixed sleep is never the way to wait.
WAIT: Final = 30.0
