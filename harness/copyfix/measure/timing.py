"""Timing on the host and the device (``copyfix.bench``, ``copyfix.measure``)."""

import statistics
import time


class Timer:
    def __init__(self, torch, on_device):
        self.on_device = on_device
        self.sync = torch.cuda.synchronize if on_device else (lambda: None)

    def device_ms(self, fn):
        if self.on_device:
            import triton

            return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    def host_us(self, fn, calls=300):
        """Median over 5 rounds of wall time per call, calls issued back to back."""
        sync, calls = self.sync, calls if self.on_device else 3
        for _ in range(20):
            fn()
        sync()
        rounds = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            rounds.append((time.perf_counter() - t0) / calls * 1e6)
            sync()
        return statistics.median(rounds)

    def host_us_interleaved(self, columns, rounds=15, calls=300):
        """Median wall µs per call of each column, {name: (context, fn)}, measured in
        alternating rounds (each round every column once, in a rotating order) so a
        host whose speed drifts weighs on every column alike."""
        sync, calls = self.sync, calls if self.on_device else 3
        names = list(columns)
        times = {name: [] for name in names}
        for r in range(rounds if self.on_device else 2):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                context, fn = columns[name]
                with context():
                    for _ in range(20 if r == 0 else 3):
                        fn()
                    sync()
                    t0 = time.perf_counter()
                    for _ in range(calls):
                        fn()
                    times[name].append((time.perf_counter() - t0) / calls * 1e6)
                    sync()
        return {name: statistics.median(t) for name, t in times.items()}
