"""What a Flower message weighs: the bytes every federation method's ledger counts (RED's round, SecAgg+'s
stages, FedAvg's rounds), one function for all of them; and what a failed reply says, in one line, for the same
ledgers."""

import re

from flwr.app import ArrayRecord, Message, RecordDict


def content_bytes(content: RecordDict) -> int:
    """What a message's records weigh: arrays' data and keys (Flower's own ArrayRecord.count_bytes), config and
    metric values as Flower counts them (8 bytes a number, 1 a bool, a string's or bytes' length, and keys), here
    also where a value is empty (SecAgg+'s legacy replies carry "", which Flower 1.42's count_bytes refuses)."""
    return sum(
        record.count_bytes()
        if isinstance(record, ArrayRecord)
        else sum(len(k) + _value_bytes(v) for k, v in record.items())
        for record in content.values()
    )


def _value_bytes(value) -> int:
    if isinstance(value, list):
        return sum(_value_bytes(v) for v in value)
    if isinstance(value, str | bytes):
        return len(value)
    return 1 if isinstance(value, bool) else 8


def failure(reply: Message) -> str:
    """Why a reply is an error, in one line: the last line of its reason (Ray's carry a whole traceback, whose
    last line is the exception the owner's app raised), without terminal colours, at most 200 characters."""
    lines = [line.strip() for line in re.sub(r"\x1b\[[0-9;]*m", "", str(reply.error.reason)).splitlines()]
    reason = next((line for line in reversed(lines) if line.strip("'>")), "").rstrip("'>")
    return f"its round failed: {reason[:200]}{'...' if len(reason) > 200 else ''}"
