"""A small generated labelled-text set with domains, for tests, demos and the speed benchmark of
`redkit fit`: short customer requests in several topics (the domains), a few intents per topic
(the labels), each rendered from templates with slot words, politeness prefixes and suffixes.

    write_topics(DIR, train=5000, domains=5, labels_per_domain=5)   # DIR/train|val|test.jsonl
"""

import json
import random
from pathlib import Path

from redkit.atomic import write_text

# topic -> (slot words, {intent: templates with {x} for a slot word})
TOPICS: dict[str, tuple[tuple[str, ...], dict[str, tuple[str, ...]]]] = {
    "banking": (
        ("card", "account", "transfer", "loan", "savings"),
        {
            "refund": (
                "I was charged twice on my {x}, please give the money back",
                "refund the fee on my {x}",
                "why did you take money from my {x} twice",
            ),
            "balance": ("how much is left on my {x}", "show me the balance of my {x}", "what is my {x} balance today"),
            "block": ("my {x} was stolen, block it now", "freeze my {x} please", "someone used my {x}, lock it"),
            "open": ("I want to open a new {x}", "how do I start a {x} with you", "sign me up for a {x}"),
            "rate": ("what interest do you pay on a {x}", "is the {x} rate going up", "tell me the rate for a {x}"),
        },
    ),
    "travel": (
        ("flight", "hotel", "train", "rental car", "cruise"),
        {
            "book": ("book a {x} to Lisbon for Friday", "I need a {x} next week", "reserve a {x} for two people"),
            "cancel": ("cancel my {x} booking", "I can't make the {x}, cancel it", "please drop my {x} reservation"),
            "delay": ("is my {x} delayed", "my {x} is late, what now", "how long is the {x} delay"),
            "baggage": (
                "how many bags can I take on the {x}",
                "my luggage got lost on the {x}",
                "is there a bag fee for the {x}",
            ),
            "upgrade": ("can I upgrade my {x}", "move me to a better {x} class", "is a {x} upgrade available"),
        },
    ),
    "cooking": (
        ("pasta", "bread", "soup", "curry", "cake"),
        {
            "recipe": ("give me a recipe for {x}", "how do I make {x} at home", "what is an easy {x} recipe"),
            "substitute": (
                "what can I use instead of eggs in {x}",
                "I have no butter for the {x}, any swap",
                "replace the cream in my {x}",
            ),
            "time": ("how long does {x} take to cook", "how many minutes for the {x}", "when is the {x} done"),
            "store": ("how do I keep leftover {x}", "can I freeze the {x}", "how long does {x} last in the fridge"),
            "wine": ("which wine goes with {x}", "pick a drink for my {x}", "red or white with {x}"),
        },
    ),
    "health": (
        ("headache", "back pain", "cough", "rash", "fever"),
        {
            "appointment": (
                "book a doctor for my {x}",
                "I need to see someone about a {x}",
                "get me an appointment for the {x}",
            ),
            "symptom": ("is a {x} at night normal", "what causes a {x}", "should I worry about this {x}"),
            "medicine": (
                "what can I take for a {x}",
                "which pill helps with {x}",
                "is there a cream or tablet for {x}",
            ),
            "insurance": (
                "does my plan cover the {x} treatment",
                "will insurance pay for my {x}",
                "is {x} care covered",
            ),
            "emergency": (
                "my {x} is very bad, call help",
                "urgent: severe {x} right now",
                "I think the {x} is an emergency",
            ),
        },
    ),
    "tech": (
        ("laptop", "phone", "router", "printer", "tablet"),
        {
            "reset": ("how do I reset my {x}", "factory reset the {x}", "wipe my {x} and start over"),
            "slow": ("my {x} is very slow", "why is the {x} so sluggish", "the {x} takes ages to do anything"),
            "connect": (
                "my {x} won't connect to wifi",
                "the {x} keeps dropping the network",
                "pair my {x} with bluetooth",
            ),
            "battery": ("the {x} battery dies fast", "my {x} won't charge", "how do I save battery on the {x}"),
            "buy": ("which {x} should I buy", "recommend a cheap {x}", "is the new {x} worth it"),
        },
    ),
}
PREFIXES = ("", "", "hi, ", "hello, ", "please, ", "quick question: ", "hey there, ", "sorry to bother you, ")
SUFFIXES = ("", "", "?", " thanks", " asap", " please", " thank you!", " :)")


def topic_records(n: int, domains: int, labels_per_domain: int, seed: int, sentences: int = 1) -> list[dict]:
    """`n` records {text, label, domain}, domains and labels drawn uniformly (deterministic in seed);
    each text `sentences` requests of its topic and intent in a row (25 make a text of about 300
    words: the long-text speed benchmark's)."""
    if not 1 <= domains <= len(TOPICS) or not 1 <= labels_per_domain <= 5:
        raise ValueError(f"at most {len(TOPICS)} domains and 5 labels per domain")
    rng = random.Random(seed)
    topics = list(TOPICS)[:domains]
    records = []
    for _ in range(n):
        topic = rng.choice(topics)
        slots, intents = TOPICS[topic]
        intent = rng.choice(list(intents)[:labels_per_domain])
        text = " ".join(
            rng.choice(PREFIXES) + rng.choice(intents[intent]).format(x=rng.choice(slots)) + rng.choice(SUFFIXES)
            for _ in range(sentences)
        )
        records.append({"text": text, "label": intent, "domain": topic})
    return records


def write_topics(
    directory: str | Path,
    train: int = 5000,
    val: int = 500,
    test: int = 500,
    domains: int = 5,
    labels_per_domain: int = 5,
    seed: int = 0,
    sentences: int = 1,
) -> Path:
    """DIR/train.jsonl, val.jsonl (unless val=0) and test.jsonl (unless test=0), each from its own seed."""
    directory = Path(directory)
    for offset, (name, n) in enumerate((("train", train), ("val", val), ("test", test))):
        if n:
            rows = topic_records(n, domains, labels_per_domain, seed * 10 + offset, sentences)
            write_text(directory / f"{name}.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    return directory


def write_clinc_format(
    directory: str | Path,
    per_label: tuple[int, int, int] = (16, 4, 4),
    oos: tuple[int, int, int] = (6, 8, 8),
    domains: int = 3,
    labels_per_domain: int = 3,
    seed: int = 0,
) -> Path:
    """The generated topics in CLINC150's published layout (data_full.json with train/val/test and
    oos_train/oos_val/oos_test as [text, intent] pairs, domains.json): `per_label` queries per label
    and split, `oos` out-of-scope queries per split, drawn from topics the in-scope domains do not use."""
    directory = Path(directory)
    pool = topic_records(40 * domains * labels_per_domain * sum(per_label), domains, labels_per_domain, seed)
    data, taken = {}, set()
    for name, count in zip(("train", "val", "test"), per_label):
        pairs = []
        for label in sorted({r["label"] for r in pool}):
            rows = [r for r in pool if r["label"] == label and r["text"] not in taken][:count]
            taken.update(r["text"] for r in rows)
            pairs += [[r["text"], label] for r in rows]
        data[name] = pairs
    outside = topic_records(200, len(TOPICS), 5, seed + 1)
    outside = [r["text"] for r in outside if r["domain"] not in list(TOPICS)[:domains]]
    start = 0
    for name, count in zip(("oos_train", "oos_val", "oos_test"), oos):
        data[name] = [[text, "oos"] for text in outside[start : start + count]]
        start += count
    grouped: dict[str, list[str]] = {}
    for r in pool:
        grouped.setdefault(r["domain"], [])
        if r["label"] not in grouped[r["domain"]]:
            grouped[r["domain"]].append(r["label"])
    write_text(directory / "data_full.json", json.dumps(data))
    write_text(directory / "domains.json", json.dumps(grouped, indent=1))
    return directory
