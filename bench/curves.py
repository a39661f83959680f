"""The loss-curve CSV that every framework baseline writes and bench/report.py reads: one row a
step with its loss, and one an epoch with the test accuracy and the epoch's time."""
from pathlib import Path

HEADER = "mode,hidden,epoch,step,loss,accuracy,time_s,epoch_time_s"


def epoch_rows(mode, hidden, epoch, losses, acc, t_all, dt):
    """The rows of epoch `epoch` (from 1): its step losses, then its accuracy and time (t_all:
    seconds since training began; dt: the epoch's)."""
    steps = len(losses)
    rows = [f"{mode},{hidden},{epoch},{(epoch - 1) * steps + k + 1},{l},,{t_all:.4f},"
            for k, l in enumerate(losses)]
    # Microseconds: an epoch of a few milliseconds would otherwise round by a few percent.
    rows.append(f"{mode},{hidden},{epoch},{epoch * steps},,{acc},{t_all:.4f},{dt:.6f}")
    return rows


def record_epoch(rows, mode, hidden, epoch, losses, acc, t_all, dt):
    """Appends epoch `epoch`'s rows to `rows` and prints its line."""
    rows += epoch_rows(mode, hidden, epoch, losses, acc, t_all, dt)
    print(f"{mode} hidden {hidden} epoch {epoch}: loss {sum(losses) / len(losses):.4f} "
          f"test acc {100 * acc:.2f}% {dt:.3f} s", flush=True)


def write(path, rows):
    """The CSV at `path`, if one was asked for."""
    if path:
        Path(path).write_text("\n".join(rows) + "\n")
