"""Where the daemon's prices come from: each pool's provider, asked for its offerings and prices, cached.

    book = ProviderPrices(providers, clock)
    book.quotes(config)   # {(pool, market): PriceQuote}, for decide() and the budget guard

The one place that calls ``Provider.prices()`` (the AWS provider reads spot price history there; GCP and local
price from their config). A 2 s cycle must not call DescribeSpotPriceHistory every time, so each pool's answer
is reused for ``PRICE_TTL_S``; ``burstd.policy.prices.price_table`` turns the offerings into quotes (the highest
offering per market, with interruption priors from a Spot Advisor snapshot when one is given).

A pool whose provider cannot answer (network, throttling, no provider) keeps its configured prices, with a
warning, and is asked again after ``RETRY_S``. A price that cannot be right (NaN, infinite, negative) is not
fallen back from: it raises ``PriceError`` naming the pool, so the decider does not run and launches are
refused (``Reconciler._refusal_fn``) until the provider answers sanely.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from burstd.config import Config
from burstd.daemon.cycle_errors import is_expected, step_failed
from burstd.daemon.logging import ev, get_logger
from burstd.domain.budget import PriceQuote
from burstd.policy.budget import PriceError
from burstd.policy.prices import PriceTable, SpotAdvisor, price_table
from burstd.providers.base import Offering, Provider

log = get_logger("prices")

#: How long a pool's offerings and prices are reused.
PRICE_TTL_S = 300.0
#: How soon a pool whose provider failed to answer is asked again (meanwhile: its configured prices).
RETRY_S = 60.0


@dataclass(frozen=True, slots=True)
class _Answer:
    at: float
    offerings: dict[Offering, int] | None  # None: the provider failed; see ``error``
    error: Exception | None = None


class ProviderPrices:
    """Each pool's ``Provider.prices()``, cached per pool, turned into quotes by ``policy.prices``."""

    def __init__(self, providers: Mapping[str, Provider], clock: Callable[[], float], *,
                 advisor: SpotAdvisor | None = None, ttl_s: float = PRICE_TTL_S, retry_s: float = RETRY_S):
        self.providers = providers
        self.clock = clock
        self.advisor = advisor
        self.ttl_s = ttl_s
        self.retry_s = retry_s
        self._answers: dict[str, _Answer] = {}
        self.last: PriceTable = PriceTable()  # the newest table (sources and warnings, for status and tests)

    def offerings(self, pool: str) -> dict[Offering, int] | None:
        """The pool's offerings and prices (micro-dollars per node-hour), None when its provider cannot say.
        Raises ``PriceError`` when it answered a price that cannot be right."""
        now = self.clock()
        hit = self._answers.get(pool)
        if hit is not None and now - hit.at < (self.ttl_s if hit.error is None else self.retry_s):
            if isinstance(hit.error, PriceError):
                raise hit.error
            return hit.offerings
        provider = self.providers.get(pool)
        if provider is None:
            return None
        try:
            answer = _Answer(now, dict(provider.prices()))
        except ValueError as exc:  # a price the provider could not read as money (e.g. "NaN"): refuse, not guess
            answer = _Answer(now, None, PriceError(f"pool {pool}: {exc}"))
        except Exception as exc:  # noqa: BLE001 - network, throttling, API gaps: the configured prices for now
            if not is_expected(exc):  # a bug in the provider's price code: say so (the fallback still applies)
                step_failed(log, "prices failed unexpectedly", exc, pool=pool)
            answer = _Answer(now, None, exc)
        self._answers[pool] = answer
        if isinstance(answer.error, PriceError):
            raise answer.error
        if answer.error is not None:
            log.warning("prices unavailable; using the configured prices",
                        extra=ev(pool=pool, error=str(answer.error), error_class=type(answer.error).__name__))
        return answer.offerings

    def table(self, config: Config) -> PriceTable:
        offerings: dict[str, dict[Offering, int]] = {}
        warnings = []
        for pool in config.pools:
            got = self.offerings(pool.name)
            if got is not None:
                offerings[pool.name] = got
            elif pool.name in self._answers:
                warnings.append(f"pool {pool.name}: prices unavailable ({self._answers[pool.name].error}); "
                                "using the configured prices")
        table = price_table(config, offerings=offerings, advisor=self.advisor)
        table.warnings.extend(warnings)
        self.last = table
        return table

    def quotes(self, config: Config) -> dict[tuple[str, str], PriceQuote]:
        return self.table(config).quotes
