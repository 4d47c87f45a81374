"""Write the bundled example private set: fictional customer-support tickets.

Every record is assembled from templates below, so the set contains no real person's data.
Users carry made-up ids (some write several tickets) to show user-level contribution bounding.

    python scripts/make_example_data.py   # rewrites src/dpsynth/examples/support_tickets.csv
"""

from __future__ import annotations

import csv
import random
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src/dpsynth/examples/support_tickets.csv"
N_RECORDS = 400
N_USERS = 260

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


def make_records(rng: random.Random) -> list[dict[str, str]]:
    users = [f"user-{i:04d}" for i in range(N_USERS)]
    records = []
    for _ in range(N_RECORDS):
        label = rng.choice(list(TEMPLATES))
        body = rng.choice(TEMPLATES[label]).format(
            product=rng.choice(PRODUCTS), amount=rng.randint(5, 400), month=rng.choice(MONTHS),
            minutes=rng.randint(2, 30), percent=rng.choice([10, 15, 20, 30]),
            code=rng.randint(100, 999), attempts=rng.randint(3, 10), days=rng.randint(3, 21),
        )
        opener = rng.choice(OPENERS)
        first = body[0].lower() if opener.endswith(", ") else body[0].upper()
        text = opener + first + body[1:] + rng.choice(CLOSERS)
        user = rng.choice(users[: N_USERS // 4]) if rng.random() < 0.3 else rng.choice(users)
        records.append({"text": text, "label": label, "user_id": user})
    return records


def main() -> None:
    records = make_records(random.Random(20261120))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["text", "label", "user_id"])
        writer.writeheader()
        writer.writerows(records)
    print(f"wrote {len(records)} records to {OUT}")


if __name__ == "__main__":
    main()
