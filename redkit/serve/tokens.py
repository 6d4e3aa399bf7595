"""Who may change what on a running server: the admin token, and each data owner's own token, stored hashed.

    --owner-tokens FILE   {"owner name": "sha256:<hex of the token's sha256>", ...}   (`redkit hash-token`)

The admin token may do everything; an owner's token may upload only its own contribution and remove only the
domains it contributed (redkit/serve/admin.py says which route allows what). The file holds no token, only
hashes: a copy of it, a backup or a `ps` listing gives nobody a token. Only the standard library: the command
line hashes a token without the serve extra.
"""

import hashlib
import hmac
import json
from pathlib import Path

from redkit.errors import RedkitError
from redkit.names import check_name

PREFIX = "sha256:"
MIN_LENGTH = 16  # characters of any token, the admin's or an owner's: a guess must cost more than a search


def token_hash(token: str) -> str:
    """The value an owner's line of FILE gives for `token`."""
    return PREFIX + hashlib.sha256(token.encode()).hexdigest()


def read_owner_tokens(file: Path) -> dict[str, bytes]:
    """{owner: sha256 digest of its token} from FILE; one line naming the file and the key otherwise (read at
    start-up, so a malformed file stops the server before it listens)."""
    try:
        raw = json.loads(Path(file).read_bytes(), object_pairs_hook=_no_key_twice)
    except OSError as err:
        raise RedkitError(f"--owner-tokens {file}: cannot read it ({err.strerror})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RedkitError(f"--owner-tokens {file}: not JSON ({err})") from None
    except ValueError as err:  # _no_key_twice
        raise RedkitError(f"--owner-tokens {file}: {err}") from None
    if not isinstance(raw, dict) or not raw:
        raise RedkitError(f'--owner-tokens {file}: must be a JSON object {{"owner name": "{PREFIX}<hex>", ...}}')
    owners: dict[str, bytes] = {}
    for owner, value in raw.items():
        check_name(owner, "owner", f"--owner-tokens {file}")
        hex_digest = value[len(PREFIX) :] if isinstance(value, str) and value.startswith(PREFIX) else ""
        try:
            digest = bytes.fromhex(hex_digest)
        except ValueError:
            digest = b""
        if len(digest) != hashlib.sha256().digest_size:
            raise RedkitError(
                f"--owner-tokens {file}: key {owner!r} must give {PREFIX} and 64 hex digits (`redkit hash-token`)"
            )
        twin = next((other for other, known in owners.items() if known == digest), None)
        if twin is not None:  # one token would act as two owners
            raise RedkitError(f"--owner-tokens {file}: keys {twin!r} and {owner!r} have the same token")
        owners[owner] = digest
    return owners


def _no_key_twice(pairs: list[tuple[str, object]]) -> dict:
    keys = [key for key, _ in pairs]
    twice = next((key for key in keys if keys.count(key) > 1), None)
    if twice is not None:  # json would keep the last one silently
        raise ValueError(f"key {twice!r} twice")
    return dict(pairs)


def owner_of(given: str, owners: dict[str, bytes]) -> str | None:
    """The owner whose token `given` is, or None. Every owner's digest is compared, each in constant time
    (hmac.compare_digest), so the time taken says nothing of which owner, if any, matched."""
    digest = hashlib.sha256(given.encode()).digest()
    found = None
    for owner, known in owners.items():
        if hmac.compare_digest(digest, known):
            found = owner
    return found
