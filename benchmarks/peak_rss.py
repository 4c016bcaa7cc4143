"""Peak resident memory over one call, sampled from a thread (what the benchmarks' fresh-process points report)."""

import threading
import time


def peak_rss_growth(call) -> tuple[object, int]:
    """``(call(), bytes)``: the peak RSS during ``call`` above the RSS before it."""
    import psutil

    process = psutil.Process()
    baseline, peak, running = process.memory_info().rss, [0], [True]

    def watch():
        while running[0]:
            peak[0] = max(peak[0], process.memory_info().rss)
            time.sleep(0.002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = call()
    finally:
        running[0] = False
        watcher.join()
    return result, max(peak[0], process.memory_info().rss) - baseline
