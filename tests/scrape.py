"""A /metrics answer read back, for the serve tests: Prometheus text -> samples, and their sums."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Scrape:
    samples: tuple[Sample, ...]
    helps: dict[str, str]         # family name -> HELP text

    @classmethod
    def parse(cls, text: str) -> "Scrape":
        samples, helps = [], {}
        for family in text_string_to_metric_families(text):
            helps[family.name] = family.documentation
            samples.extend(Sample(s.name, dict(s.labels), s.value) for s in family.samples)
        return cls(tuple(samples), helps)

    def matching(self, name: str, **labels: str) -> list[Sample]:
        return [s for s in self.samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]

    def total(self, name: str, **labels: str) -> float:
        """The sum of `name`'s series whose labels include `labels` (0 when there is none)."""
        return sum(s.value for s in self.matching(name, **labels))
