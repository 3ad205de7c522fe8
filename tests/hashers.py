"""The test process's password hasher: Django's PBKDF2 at 1,000 iterations instead of 1,000,000 (~0.2 s of CPU per
account with a password). Same algorithm name and format, so a server process of a test (Django's default hashers)
verifies what this one stored, and this one verifies theirs (by the iteration count each hash carries)."""
from django.contrib.auth.hashers import PBKDF2PasswordHasher


class QuickPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1_000
