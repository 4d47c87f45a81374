"""Readable names and one-line explanations for the keys a report shows.

metrics.json and metrics.jsonl use short keys (`classification.majority_class_rate`); a
reader of the report needs a name and a sentence on how to read the number. A key without
an entry is shown with its underscores turned to spaces, so a new metric still reads.
"""

from __future__ import annotations

GLOSSARY: dict[str, tuple[str, str]] = {
    # utility (metrics.json `utility`): train on synthetic, test on real
    "classification.model": (
        "Downstream classifier", "The model trained on the synthetic set and tested on real "
        "records."),
    "classification.accuracy": (
        "Downstream accuracy", "Share of real test records the classifier trained on the "
        "synthetic set labels correctly; higher is better."),
    "classification.macro_f1": (
        "Downstream macro-F1", "F1 averaged over labels, so a small label counts as much as a "
        "large one."),
    "classification.n_train": (
        "Classifier training records", "Synthetic records the classifier was trained on."),
    "classification.n_test": (
        "Classifier test records", "Real test records it was scored on."),
    "classification.majority_class": (
        "Most common test label", "The label of the real test split that occurs most often."),
    "classification.majority_class_rate": (
        "Majority-class rate", "Accuracy of always answering the most common label: an "
        "accuracy near it means the synthetic set taught nothing."),
    "next_token.accuracy": (
        "Next-token accuracy", "A small LM trained on the synthetic texts predicts each next "
        "token of real texts; higher is better."),
    "next_token.oov_rate": (
        "Unseen-token rate", "Share of real tokens never seen in the synthetic texts (always "
        "missed)."),
    # fidelity (metrics.json `fidelity`): synthetic against the real test split
    "mauve": ("MAUVE", "1 = the two sets' embedding histograms are indistinguishable, near 0 = "
              "disjoint."),
    "frechet_distance": (
        "Fréchet embedding distance", "Distance between Gaussians fitted to the two sets' "
        "embeddings; 0 for identical sets, lower is better."),
    "knn_precision": (
        "k-NN precision", "Share of synthetic records that sit among real ones; low means "
        "texts unlike any real text."),
    "knn_recall": (
        "k-NN recall", "Share of real records the synthetic set covers; low means parts of "
        "the real data are missing."),
    "wasserstein_distance": (
        "Wasserstein embedding distance", "Cost of moving one set's embeddings onto the "
        "other's; lower is better."),
    "self_similarity.synthetic": (
        "Self-similarity, synthetic", "Mean cosine similarity between synthetic records; far "
        "above the real value means a repetitive set."),
    "self_similarity.real_test": (
        "Self-similarity, real test", "The same for the real test split: the value to aim "
        "for."),
    "length.real_mean_words": ("Mean words, real test", "Average length of a real test text."),
    "length.synthetic_mean_words": (
        "Mean words, synthetic", "Average length of a synthetic text."),
    "length.wasserstein_words": (
        "Length distance (words)", "How many words, on average, lengths must move to match; "
        "0 = same length distribution."),
    "length.ks_statistic": (
        "Length KS statistic", "Largest gap between the two length distributions' CDFs; 0 = "
        "same, 1 = disjoint."),
    "labels.total_variation": (
        "Label-mix distance", "Total variation between the label shares; 0 = same mix, 1 = "
        "disjoint."),
    # reference and privacy (private only)
    "real_train_classification.model": (
        "Reference classifier", "The same classifier, trained on the real train split."),
    "real_train_classification.accuracy": (
        "Real-train reference accuracy", "Accuracy of the classifier trained on the private "
        "records: the ceiling for the synthetic set."),
    "real_train_classification.macro_f1": (
        "Real-train reference macro-F1", "Its macro-F1."),
    "real_train_classification.n_train": (
        "Reference training records", "Real train records it was trained on."),
    "copies.exact": (
        "Exact copies of private records", "Synthetic texts equal to a private one after "
        "case and whitespace folding; should be 0."),
    "copies.exact_fraction": ("Exact-copy share", "The same, as a share of the synthetic set."),
    "copies.near": (
        "Near copies of private records", "Synthetic texts whose nearest private record has "
        "similarity at or above the threshold."),
    "copies.near_fraction": ("Near-copy share", "The same, as a share of the synthetic set."),
    "copies.near_threshold": (
        "Near-copy threshold", "Cosine similarity from which a text counts as a near copy."),
    "membership_inference.n_per_side": (
        "Attack records per side", "Members (private) and non-members (real test) scored."),
    "membership_inference.loss_attack_auc": (
        "Membership attack AUC (loss)", "0.5 = an attacker learns nothing about who was in "
        "the private set; near 1 = leakage."),
    "membership_inference.distance_attack_auc": (
        "Membership attack AUC (distance)", "The same attack, scored by similarity to the "
        "nearest synthetic record."),
    "nearest_private_similarity.synthetic": (
        "Nearest-private similarity, synthetic", "Cosine similarity of a synthetic record to "
        "its nearest private record; a pile near 1 means copying."),
    "nearest_private_similarity.real_test_baseline": (
        "Nearest-private similarity, real test", "The same for fresh real records: the "
        "baseline to compare with."),
    # per-iteration fields (metrics.jsonl)
    "epsilon_spent": ("ε spent so far", "The ledger's composed ε after the iteration."),
    "population": ("Population", "Candidate texts scored in the iteration."),
    "elites": ("Elites kept", "Candidates the DP votes selected."),
    "noisy_votes_total": ("Noisy votes, total", "Sum of the DP nearest-neighbour votes."),
    "noisy_votes_max": ("Noisy votes, top candidate", "The largest DP vote of one candidate."),
    "candidates_above_threshold": (
        "Candidates above threshold", "Candidates whose noisy vote passed the threshold."),
    "tau": ("Similarity threshold τ", "The DP similarity threshold in use."),
    "selected": ("Selected", "Texts the DP histogram selected."),
    "kept": ("Kept", "Selected texts that passed the perplexity filter."),
    "labels_running": ("Labels still evolving", "Labels not yet stopped."),
    "perplexity_threshold": ("Perplexity threshold", "The filter's cut-off."),
}


def readable(key: str) -> str:
    """The display name of a metric or per-iteration key; a key below an entry
    (`nearest_private_similarity.synthetic.median`) is named by it, the rest in brackets."""
    entry, rest = _entry(key)
    if entry is None:
        return _humane(key)
    return f"{entry[0]} ({rest.replace('_', ' ')})" if rest else entry[0]


def explain(key: str) -> str:
    """One line on how to read the value of `key`; empty when there is no entry."""
    entry, _ = _entry(key)
    return entry[1] if entry is not None else ""


def _entry(key: str) -> tuple[tuple[str, str] | None, str]:
    """The glossary entry for `key` or its longest dotted prefix, and what is left over."""
    parts = key.split(".")
    for cut in range(len(parts), 0, -1):
        entry = GLOSSARY.get(".".join(parts[:cut]))
        if entry is not None:
            return entry, ".".join(parts[cut:])
    return None, key


def _humane(key: str) -> str:
    text = key.replace("_", " ").replace(".", ", ")
    return text[:1].upper() + text[1:]
