"""Write the bundled example: fictional support tickets and a fictional public forum.

- support_tickets.csv: the private set, 400 tickets with made-up user ids (some write several
  tickets, to show user-level contribution bounding);
- support_tickets_test.csv: 200 more tickets from the same templates, the held-out split the
  demo's closing line scores the synthetic data on;
- support_forum.txt: the public pool the demo selects from, posts from the same fictional
  products' public help forum, written from templates of their own (other phrasings, other
  problems, and posts no ticket resembles), with its MiniLM embeddings beside it.

Every text is assembled from templates below, so nothing holds a real person's data.

    python scripts/make_example_data.py   # rewrites the files in src/dpsynth/examples/
"""

from __future__ import annotations

import csv
import random
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "src/dpsynth/examples"
N_RECORDS = 400
N_TEST = 200
N_USERS = 260
N_POSTS_PER_TEMPLATE = 30

PRODUCTS = ["the Nimbus router", "my Quill tablet", "the Orbit smart speaker", "the Falcon laptop",
            "my Pebble watch", "the Harbor app", "the Lumen desk lamp", "my Vega headphones"]
TEMPLATES = {
    "billing": [
        "I was charged twice for {product} this month. Please refund the duplicate payment of "
        "${amount}.",
        "My invoice shows ${amount} but my plan should cost less. Can you explain the extra fee "
        "on my {month} bill?",
        "The discount code was not applied when I bought {product}, so I paid ${amount} instead "
        "of the sale price.",
        "I cancelled my subscription in {month} but I am still being billed ${amount} every "
        "month.",
        "Please update the credit card on file; my old card expired and the {month} payment "
        "failed.",
    ],
    "technical": [
        "{product} keeps disconnecting from wifi every {minutes} minutes since the last update.",
        "After the {month} firmware update {product} will not turn on. I tried holding the power "
        "button for {minutes} seconds.",
        "The screen on {product} flickers when the battery drops below {percent} percent.",
        "{product} is very slow to sync and shows error code E{code} each time I open it.",
        "Bluetooth pairing with {product} fails with a timeout after about {minutes} seconds.",
    ],
    "account": [
        "I cannot log in to my account; the password reset email never arrives.",
        "Please merge my two accounts. I created a second one by mistake in {month}.",
        "How do I turn on two-factor authentication for my account? The setting is greyed out.",
        "My account was locked after {attempts} failed login attempts and I need access today.",
        "I would like to delete my account and all data linked to {product}.",
    ],
    "shipping": [
        "My order for {product} was supposed to arrive {days} days ago and tracking has not "
        "updated.",
        "The box for {product} arrived damaged and the charger is missing.",
        "I received the wrong colour of {product}. How do I exchange it?",
        "Can I change the delivery address for my order? It has not shipped yet.",
        "The courier marked {product} as delivered but nothing came to my door.",
    ],
}
OPENERS = ["", "Hello, ", "Hi support team, ", "Good morning. ", "Urgent: "]
CLOSERS = ["", " Thanks.", " Thank you for your help.", " Please advise.",
           " This is the second time I am writing about this."]
MONTHS = ["January", "March", "May", "July", "September", "November"]

FORUM = {
    "billing": [
        "Anyone else double charged after renewing {product}? Support refunded me in {days} days.",
        "PSA: check your {month} statement, the annual plan renewed at ${amount} without a "
        "reminder.",
        "How do refunds work here? I returned {product} but the ${amount} has not come back.",
        "Is there a student discount on {product}? The checkout page only shows the full price.",
        "Changed my payment method and now the app says my {month} invoice is overdue.",
        "Why does the family plan cost ${amount} when the website says it is cheaper?",
    ],
    "technical": [
        "Fix that worked for me: {product} dropped wifi constantly until I turned off band "
        "steering.",
        "Firmware {code} bricked {product}? Hold the reset pin for {minutes} seconds, it came "
        "back.",
        "{product} gets hot and the battery dies by noon since the update. Anyone else?",
        "Error E{code} when syncing {product} with the desktop client. Reinstalling did not help.",
        "Bluetooth audio on {product} stutters every few seconds, tried two phones.",
        "Screen on {product} stays black after waking from sleep, only a hard restart fixes it.",
    ],
    "account": [
        "Locked out after enabling two-factor on a new phone. How do I recover the account?",
        "The password reset link says expired every time, even straight after requesting it.",
        "Can I move {product} to my partner's account without resetting it?",
        "Tip: if the login page loops, clear cookies for the account site, it fixed mine.",
        "How long does it take for an account deletion request to go through?",
        "Two accounts with the same email after the {month} migration, which one do I keep?",
    ],
    "shipping": [
        "Tracking for {product} has said label created for {days} days. Normal around {month}?",
        "Courier left {product} with a neighbour I have never met. What are my options?",
        "Ordered {product} in black, got silver. Is the exchange free or do I pay postage?",
        "Does anyone know if they ship to PO boxes? My order is stuck at the depot.",
        "Package arrived crushed. {product} inside seems fine, should I still report it?",
        "Delivery estimate moved from {days} days to three weeks after I paid for express.",
    ],
    None: [
        "Loving {product} so far, the build quality is much better than my old one.",
        "Feature request: a dark mode for the Harbor app, please.",
        "Which is better for travel, {product} or the Vega headphones?",
        "Just got {product} as a gift, any setup tips?",
        "The new colours announced in {month} look great, anyone ordered yet?",
        "Community meetup for Falcon laptop owners next {month}, who is in?",
    ],
}
"""Public forum posts: the same products and topics in other words, plus chatter that no
ticket resembles (None), so that the DP votes have something to leave out."""


def fill(template: str, rng: random.Random) -> str:
    return template.format(
        product=rng.choice(PRODUCTS), amount=rng.randint(5, 400), month=rng.choice(MONTHS),
        minutes=rng.randint(2, 30), percent=rng.choice([10, 15, 20, 30]),
        code=rng.randint(100, 999), attempts=rng.randint(3, 10), days=rng.randint(3, 21),
    )


def make_records(rng: random.Random, n: int) -> list[dict[str, str]]:
    users = [f"user-{i:04d}" for i in range(N_USERS)]
    records = []
    for _ in range(n):
        label = rng.choice(list(TEMPLATES))
        body = fill(rng.choice(TEMPLATES[label]), rng)
        opener = rng.choice(OPENERS)
        first = body[0].lower() if opener.endswith(", ") else body[0].upper()
        text = opener + first + body[1:] + rng.choice(CLOSERS)
        user = rng.choice(users[: N_USERS // 4]) if rng.random() < 0.3 else rng.choice(users)
        records.append({"text": text, "label": label, "user_id": user})
    return records


def make_forum(rng: random.Random) -> list[str]:
    """Distinct posts, several fillings of each forum template, in a shuffled order."""
    posts = {_capitalised(fill(t, rng)) for templates in FORUM.values() for t in templates
             for _ in range(N_POSTS_PER_TEMPLATE)}
    return rng.sample(sorted(posts), len(posts))


def _capitalised(text: str) -> str:
    return ". ".join(s[:1].upper() + s[1:] for s in text.split(". "))


def write_tickets(path: Path, records: list[dict[str, str]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["text", "label", "user_id"])
        writer.writeheader()
        writer.writerows(records)
    print(f"wrote {len(records)} records to {path}")


def write_forum(path: Path, posts: list[str]) -> None:
    """The pool and its MiniLM embeddings, stored where the pool generator looks for them."""
    from dpsynth.backends.config import MiniLMConfig
    from dpsynth.backends.factory import build_embedder
    from dpsynth.backends.pool.generator import PoolGenerator

    path.write_text("\n".join(posts) + "\n", encoding="utf-8")
    for old in path.parent.glob(f"{path.name}.emb-*.npy"):
        old.unlink()
    PoolGenerator(path, build_embedder(MiniLMConfig()))
    print(f"wrote {len(posts)} public posts and their embeddings to {path}")


def main() -> None:
    EXAMPLES.mkdir(parents=True, exist_ok=True)
    rng = random.Random(20261120)
    write_tickets(EXAMPLES / "support_tickets.csv", make_records(rng, N_RECORDS))
    write_tickets(EXAMPLES / "support_tickets_test.csv", make_records(rng, N_TEST))
    write_forum(EXAMPLES / "support_forum.txt", make_forum(random.Random(20261122)))


if __name__ == "__main__":
    main()
