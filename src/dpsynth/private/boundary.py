"""`ctx.private`: the one door to the private side of a run.

It holds the private records, the ledger and the noise source, and the engine where the
records' embeddings live. A recipe asks it for one kind of release per method, handing it
the planned stage (`BudgetPlan.stage`), so the stage's name, mechanism, sensitivity and event
reach the ledger together; what comes back is a DP release, or computed from one. Public
facts (N, k, the label set) and the budget spent can be read here too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from dpsynth.data import Access, PrivateDataset
from dpsynth.errors import DpsynthError
from dpsynth.privacy.ledger import PrivacyLedger
from dpsynth.privacy.mechanisms import DisjointSequences, ExponentialSample
from dpsynth.privacy.noise import NoiseSource
from dpsynth.privacy.planning import StagePlan
from dpsynth.private.engine import Engine
from dpsynth.private.engine.nearest import Voters
from dpsynth.private.engine.ray import ShardedVoters
from dpsynth.private.releases.decoding import DecodingSetup, TextRequest, dp_decode, layout
from dpsynth.private.releases.limited_domain import dp_select_parents
from dpsynth.private.releases.metadata import (
    dp_keyword_votes,
    dp_label_distribution,
    dp_length_histogram,
    dp_length_range,
    noisy_histogram,
    to_distribution,
)
from dpsynth.private.releases.pate import label_within_budget
from dpsynth.private.releases.self_similarity import dp_self_similarity
from dpsynth.private.releases.topics import dp_condition_histogram
from dpsynth.private.releases.voting import dp_labelled_votes, dp_nearest_votes
from dpsynth.private.training.conditioning import Conditioning

if TYPE_CHECKING:
    from dpsynth.backends.generators.context_lm import ContextLM
    from dpsynth.backends.offline.trainable import TrainableLM
    from dpsynth.private.training.state import TrainingCheckpoints


class Private:
    """The private side of a run, behind one method per kind of release."""

    def __init__(self, data: PrivateDataset, ledger: PrivacyLedger, noise: NoiseSource,
                 engine: Engine) -> None:
        self._data, self._ledger, self._noise, self._engine = data, ledger, noise, engine
        self._held: Voters | ShardedVoters | None = None
        self._taught = False
        """The voters' embeddings went to kd_tutor's teachers: none may be taken again."""

    def __repr__(self) -> str:
        return f"Private(n_units={self.n_units})"

    def __reduce_ex__(self, protocol: object) -> object:
        raise TypeError("the private side must not reach a checkpoint, cache or worker")

    # -- public facts ------------------------------------------------------------------------

    @property
    def label_names(self) -> tuple[str, ...] | None:
        return self._data.label_names

    @property
    def has_labels(self) -> bool:
        return self._data.has_labels

    @property
    def records_per_unit(self) -> int:
        return self._data.records_per_unit

    @property
    def n_units(self) -> int:
        return self._data.n_units

    def spent(self) -> float:
        """ε spent so far, composed over every release."""
        return self._ledger.spent()

    def state_dict(self) -> dict[str, Any]:
        """The ledger and the noise stream, for a checkpoint."""
        return {"ledger": self._ledger.to_dict(), "noise": self._noise.state_dict()}

    # -- metadata (dpga-textsyn §3.2; every recipe's label shares) ---------------------------

    def label_distribution(self, stage: StagePlan) -> np.ndarray:
        """The label distribution, from a noisy histogram of label counts."""
        return dp_label_distribution(self._data, stage.mechanism, self._ledger, self._noise,
                                     stage.name)

    def label_counts(self, stage: StagePlan) -> np.ndarray:
        """The noisy count of records per label (clipped at zero); without labels, one cell:
        the noisy count of records."""
        if self._data.has_labels:
            codes = self._data.label_codes(Access.LEDGERED_OP)
            counts = np.bincount(codes, minlength=len(self.label_names or ()))
        else:
            counts = np.array([len(self._data.texts(Access.LEDGERED_OP))])
        return np.clip(noisy_histogram(counts, stage.mechanism, self._ledger, self._noise,
                                       stage.name), 0.0, None)

    def length_range(self, stage: StagePlan, max_words: int) -> tuple[int, int]:
        """Approximate minimum and maximum length in words, by two runs of SVT."""
        return dp_length_range(self._data, stage.mechanism, max_words, self._ledger,
                               self._noise, stage.name)

    def length_histogram(self, stage: StagePlan, edges: np.ndarray) -> np.ndarray:
        """Noisy count of texts per length bin [edges[i], edges[i+1]) in words (the public
        edges fixed by the config or by earlier releases; lengths outside clipped in)."""
        return dp_length_histogram(self._data, edges, stage.mechanism, self._ledger,
                                   self._noise, stage.name)

    def keyword_votes(self, stage: StagePlan, keyword_embeddings: np.ndarray,
                      keyword_labels: np.ndarray | None) -> np.ndarray:
        """Noisy votes of the records for their nearest keyword of their own label."""
        return dp_keyword_votes(self._voters(), keyword_embeddings, keyword_labels,
                                stage.mechanism, self._ledger, self._noise, stage.name)

    def similarity_threshold(self, stage: StagePlan, n_buckets: int) -> float:
        """DP mean pairwise cosine similarity of the records (dpga-textsyn's τ)."""
        return dp_self_similarity(self._data, self._voters().embeddings, stage.mechanism,
                                  n_buckets, self._ledger, self._noise, stage.name)

    # -- nearest-neighbour selection (pe, dpga, eda) -----------------------------------------

    def nearest_votes(self, stage: StagePlan, candidates: np.ndarray,
                      candidate_groups: np.ndarray | None) -> np.ndarray:
        """Noisy vote count per candidate: each sampled record votes for its nearest
        candidate of its own group (label)."""
        return dp_nearest_votes(self._voters(), candidates, candidate_groups, stage.mechanism,
                                self._ledger, self._noise, stage.name, self.records_per_unit)

    def labelled_votes(self, stage: StagePlan, candidates: np.ndarray,
                       n_labels: int) -> np.ndarray:
        """Noisy vote count per candidate and label, shape (candidates, n_labels): each
        sampled record votes for its nearest candidate, in its own label's cell."""
        return dp_labelled_votes(self._voters(), candidates, n_labels, stage.mechanism,
                                 self._ledger, self._noise, stage.name, self.records_per_unit)

    def select_parents(self, stage: StagePlan, candidates: np.ndarray,
                       candidate_groups: np.ndarray) -> dict[int, list[int]]:
        """Per candidate group, the candidates LimitedDomain top-k selects from the records'
        nearest-neighbour votes, best first."""
        return dp_select_parents(self._voters(), candidates, candidate_groups, stage.mechanism,
                                 self._ledger, self._noise, stage.name, self.records_per_unit)

    # -- ctcl, dpft --------------------------------------------------------------------------

    def condition_distribution(self, stage: StagePlan, centroids: np.ndarray) -> np.ndarray:
        """The distribution over (label, topic) cells (one row without labels) of the
        records' nearest topics, from a noisy histogram."""
        noisy = dp_condition_histogram(self._data, self._voters(), centroids, stage.mechanism,
                                       self._ledger, self._noise, stage.name)[1]
        return to_distribution(noisy.ravel()).reshape(noisy.shape)

    def fine_tune(self, stage: StagePlan, lm: TrainableLM, conditioning: Conditioning,
                  checkpoints: TrainingCheckpoints, **settings: Any) -> None:
        """DP-Adam on each record's document (`conditioning`), `stage.spec.compositions`
        steps at the stage's sampling rate and noise multiplier; `settings` are the rest of
        `DpTraining`. The records' topics are found first, then the embeddings are freed."""
        from dpsynth.private.training.dp_training import (
            DpTraining,
            dp_finetune,
            training_sequences,
        )

        topics = (None if conditioning.centroids is None
                  else self._voters().nearest(conditioning.centroids))
        self.close()
        cut = settings.get("max_length", DpTraining.max_length)

        def document(i: int, label: str | None, text: str) -> tuple[list[int], int]:
            # cut to what training reads as it is tokenised: memory set by max_length, not by
            # how long the private records are
            ids, start = lm.document(conditioning.label_name(label),
                                     conditioning.keywords[topics[i]] if topics is not None
                                     else (), text, kind=conditioning.document)
            return list(ids[:cut]), start

        documents = training_sequences(self._data, document)
        config = DpTraining(steps=stage.spec.compositions,
                            sampling_rate=stage.spec.sampling_rate,
                            noise_multiplier=stage.noise_scale,
                            expected_batch_size=max(1, round(stage.spec.sampling_rate
                                                             * self._data.n_units)),
                            **settings)
        dp_finetune(lm.fresh_model(), [ids for ids, _ in documents], lm.pad_id, config,
                    self._ledger, stage.name, stage.release_event, self._noise.random_key,
                    checkpoints, starts=[start for _, start in documents])

    # -- dp_decoding -------------------------------------------------------------------------

    def decode(self, stage: StagePlan, lm: ContextLM, setup: DecodingSetup,
               requests: Sequence[TextRequest], buckets: Sequence[int], seed: int,
               temperature: float) -> list[list[int]]:
        """Token ids of each requested text, sampled token by token from `lm` with the
        records of the request's batch in its context (each record's shift clipped to C, the
        sum over B, the exponential mechanism at `temperature`): one release, charged as one
        text's `max_tokens` draws of the stage's ε (the batches are disjoint)."""
        step = ExponentialSample(temperature, 2 * setup.clip / setup.batch_size)
        texts = DisjointSequences(step, setup.max_tokens,
                                  layout(self._data, requests, buckets, seed))
        return dp_decode(self._data, lm, setup, requests, buckets, seed, texts, self._ledger,
                         self._noise, stage.name)

    # -- kd_tutor ----------------------------------------------------------------------------

    def teacher_labels(self, stage: StagePlan, negatives: np.ndarray, queries: np.ndarray,
                       *, n_teachers: int, batch: int, labelled: bool, soft: bool,
                       seed: int) -> np.ndarray:
        """Noisy PATE labels (`pate.shares`, a row per query) of a prefix of `queries`,
        batch by batch within the budget, from hard or `soft` votes: `n_teachers` teachers
        of the private units against the public `negatives` (binary, or with `labelled` one
        class per label besides public), fit where the embeddings are and stopped once
        asked. The partitions and the soft votes' draws are keyed by the run's noise source,
        never by a record: the voters' embeddings, taken before the first release, are what
        they learn from (a cluster's voters become the teachers), so nothing private is
        embedded again."""
        partition_key = self._noise.random_key()
        soft_key = self._noise.random_key() if soft else None  # each soft vote's draw
        teachers = self._engine.teachers(self._data, self._voters(), negatives, n_teachers,
                                         partition_key, seed, labelled)
        self.close()
        self._taught = True
        try:
            return label_within_budget(teachers, queries, stage.mechanism, batch,
                                       self._ledger, self._noise, stage.name,
                                       1 + len(self.label_names or ()) if labelled else 2,
                                       soft_key)
        finally:
            teachers.close()  # sharded teachers' actors stop, with what they learnt

    # -- the engine --------------------------------------------------------------------------

    def embed_records(self) -> None:
        """Embed the records as voters now, before the recipe's first release (the run calls
        this for `Recipe.embeds_private`): embedding is the step that can fail on one record's
        text, and a failure must come before anything is charged. kd_tutor's teachers learn
        from these embeddings too."""
        self._voters()

    def _voters(self) -> Voters | ShardedVoters:
        """The records as nearest-neighbour voters, embedded once per run: never again after
        kd_tutor's teachers took them, when a release may already have been made."""
        if self._taught:
            raise DpsynthError("the private voters went to kd_tutor's teachers; a release "
                               "that reads them must come before the teachers")
        if self._held is None:
            self._held = self._engine.voters(self._data)
        return self._held

    def close(self) -> None:
        """Free the voters (sharded ones stop their actors): at the end of the run, or
        earlier, once no release needs them."""
        if self._held is not None:
            self._held.close()
            self._held = None
