"""The measurement part of every notebook: one module per framework, one shared core (this file).

A notebook reads as its framework's tutorial first (data, model, training loop, evaluation, save, export);
what only the benchmark needs comes after, under its `## Measurement` heading, in short calls into the
module of its framework:

    from support.measure import pytorch as measure        # imports torch; `support` itself stays numpy-only
    bench = measure.start("cnn_cifar10", settings, device, precision=precision, compilation=compilation,
                          record_path=record_path)   # checks the variant; stops a run that cannot be
    ...
    with bench.epoch(len(train_loader)):    # in the training loop: one lap of the epoch timer, synchronised
        ...
    steps = bench.steady_state(lambda: train_step(xb, yb), loss=torch.Tensor.item)
    measure.write(bench, model, metrics={"accuracy": accuracy}, curve=curve, data=ds.kind)

This core is numpy and the standard library only (every kernel imports it); the framework modules add what
differs: how the framework waits for its device (`sync`), describes its environment, counts its parameters,
reads its weights for the initialisation check (support.init) and reports its device's peak memory.
"""

from __future__ import annotations

import dataclasses
import shutil
from contextlib import contextmanager

from support import files, hardware, profiles, records, timing
from support import init as initial
from support import operators as ops
from support import precision as prec
from support.parity import agree  # noqa: F401  (re-exported: the save/load and ONNX agreement checks)


class Bench:
    """One notebook run's measurement: what it is (task, framework, variant, precision, compilation), the epoch
    timer, the steady state, the sweep and the record. Made by a framework module's `start()`."""

    def __init__(
        self,
        task: str,
        framework: str,
        settings,
        *,
        precision: str,
        compilation: str,
        record_path,
        environment: dict,
        gpu: bool,
        sync=None,
        compilation_key: str | None = None,
        variant: str = "",
        devices: int = 1,
        device_memory=None,
        refusal: str | None = None,
        refuse=None,
        own_bf16=None,
        matmul=None,
        gpu_capability=None,
    ):
        """`refusal`: why the framework itself cannot run this run at all (its own words), asked first; `refuse(
        precision)` why it cannot compute a precision on this device; then the device (support.hardware.reason):
        `own_bf16()` is the framework's own answer whether
        its kernels compute bfloat16 on this CPU, `matmul(dtype)` its probe, `gpu_capability` the GPU's
        compute capability (major, minor) where the framework tells it."""
        prec.check(precision, compilation)
        self.task, self.framework, self.settings, self.variant = task, framework, settings, variant
        self.devices = devices  # data parallelism: each training step takes the task's batch on every device
        self.precision, self.record_path, self.environment, self.gpu, self.sync = (
            precision,
            record_path,
            environment,
            gpu,
            sync,
        )
        self.device_memory = device_memory  # a GPU's (free bytes, the framework's peak in use): the sweep's guard
        self.compilation = prec.resolve(compilation, compilation_key or framework, task)
        self.epochs = timing.Stopwatch("epoch", warmup=getattr(settings, "warmup_epochs", 1), sync=sync)
        self.steps_per_epoch = None
        self.fields: dict = {}  # what the measurement part adds to the record (steps, sweep, checks)
        self._folder = None  # the run's scratch folder, made by folder()
        cpu = hardware.Cpu()
        self.environment["hardware"] = hardware.describe(cpu)  # the CPU's ISA level, its cap, bf16 by its flags
        print(f"hardware: {hardware.summary(cpu)}" if not gpu else f"hardware: a GPU; host {hardware.summary(cpu)}")
        self._refuse = refuse
        self._device = dict(gpu=gpu, gpu_capability=gpu_capability, own=own_bf16, matmul=matmul, cpu=cpu)
        self._reasons: dict = {}
        reason = refusal or self.reason(precision)
        if reason:
            self.stop(reason)

    def reason(self, precision: str) -> str | None:
        """Why the framework (`refuse`) or this device (support.hardware.reason) cannot compute `precision`; None
        where it can. Asked once per precision: the operator benchmarks ask it for every dtype they measure."""
        if precision not in self._reasons:
            own = self._refuse(precision) if self._refuse else None
            self._reasons[precision] = own or hardware.reason(precision, **self._device)
        return self._reasons[precision]

    @property
    def compiled(self) -> bool:
        """Whether this run compiles (the `compilation` parameter, `auto` resolved to the framework's default)."""
        return self.compilation == "on"

    def stop(self, reason: str, status: str = "unsupported"):
        """End the notebook here: write the record of a combination that cannot run and raise records.Unsupported."""
        records.stop(
            self.record_path,
            reason,
            task=self.task,
            framework=self.framework,
            params=self.settings,
            environment=self.environment,
            precision=self.precision,
            compilation=self.compilation,
            status=status,
            variant=self.variant,
        )

    def folder(self):
        """The scratch folder for this run's saved model and exported graph: the project's cache, never home, one
        folder per process (support.files.scratch), so two variants running at once keep apart. Made empty on the
        first call; later calls (the export check's) return it with what the notebook saved there."""
        if self._folder is None:
            self._folder = files.scratch(self.task, self.framework)
        return self._folder

    # --- the learner's path: one line in the training loop ---------------------------------------------------
    @contextmanager
    def epoch(self, steps: int):
        """One lap of the epoch timer around an epoch of `steps` training steps of the task's batch size on each of
        the run's devices (synchronised at both ends). The laps give the record's time per epoch and its samples
        per second; the first is the warm-up."""
        self.steps_per_epoch = steps
        with self.epochs.lap(samples=steps * self.settings.batch_size * self.devices):
            yield

    # --- the measurement part ----------------------------------------------------------------------------------
    def steady_state(self, step, *, loss=None, samples: int | None = None, name: str = "steps") -> dict:
        """The training step's compute throughput on one batch in memory (support.timing.steady_state), with the
        task's warm-up and repeats; `loss(out)` reads a step's loss as a float (the smoke tests' learning check).
        Recorded under `name`: "steps" for the notebook's step, another name for a variant of it."""
        settings = self.settings
        steps = timing.steady_state(
            step,
            steps=settings.steps_per_repeat,
            repeats=settings.step_repeats,
            warmup=settings.warmup_steps,
            sync=self.sync,
            loss=loss,
            samples=settings.batch_size if samples is None else samples,
        )
        print((f"{name}: " if name != "steps" else "") + timing.describe(steps))
        self.fields[name] = steps
        return steps

    # --- inference (ResNet-50): the first call, then batches ------------------------------------------------
    def first_call(self, fn):
        """Call `fn` once, timed on its own (synchronised), and return its result: the first batch pays for
        compilation and kernel selection. Recorded as the run's first step."""
        out, seconds = timing.timed(fn, sync=self.sync)
        self.fields["first_step_s"] = seconds
        print(f"first call {seconds:.3g} s" + (" (compilation included)" if self.compiled else ""))
        return out

    def throughput(self, fn, *, samples: int | None = None) -> dict:
        """Inference throughput: `fn` (one batch, on the device) timed per call after the task's warm-up
        batches (support.timing.benchmark), as the record's timing: latency per batch and images per second."""
        settings = self.settings
        summary = timing.benchmark(
            fn,
            repeats=settings.n_batches,
            warmup=settings.warmup_batches,
            samples=settings.batch_size if samples is None else samples,
            sync=self.sync,
        )
        print(timing.describe(summary))
        self.fields["timing"] = summary
        return summary

    # --- the profile: where a steady-state step's time goes (support/profiles.py) -------------------------------
    def profile(self, step, tracer) -> dict:
        """Profile the task's `profile_steps` calls of the steady-state `step()` (already warm) under the
        framework's profiler: `tracer` (the framework module's) has `start(folder)`, which starts its profiler
        writing in `folder`, `stop()`, which stops it and returns the Chrome trace it made (a path or a dict), and
        `reader` and `version` (support.profiles.READERS' name, the profiler's version). The steps' wall time is
        taken between the two, synchronised at both ends. See `profiled`."""
        steps = self.settings.profile_steps
        tracer.start(self.profile_folder())
        try:
            _, wall_s = timing.timed(lambda: timing.repeated(step, steps), sync=self.sync)
        finally:
            trace = tracer.stop()
        return self.profiled(tracer, trace, steps=steps, wall_s=wall_s)

    def profiled(self, tracer, trace, *, steps: int, wall_s: float) -> dict:
        """The breakdown of `steps` profiled steps that took `wall_s`: the trace's operations (support.profiles
        .operations with `tracer.reader`) by category, and the overhead; printed and recorded as `breakdown`. The
        trace is kept gzipped beside the record (`trace_path`), to open in Perfetto."""
        trace = profiles.load(trace) if not isinstance(trace, dict) else trace
        result = profiles.breakdown(profiles.operations(trace, tracer.reader), steps=steps, wall_s=wall_s)
        path = profiles.save(trace, self.trace_path())
        steady = self.fields.get("steps")
        result.update(
            profiler=f"{profiles.READERS[tracer.reader].profiler} {tracer.version}".strip(),
            trace=path.name,
            steady_step_s=steady["median_s"] if steady else None,  # the same step unprofiled
        )
        print(profiles.describe(result) + f"\ntrace: {path}")
        self.fields["breakdown"] = result
        return result

    def profile_folder(self):
        """An empty folder for the profiler's own files, in the run's scratch folder."""
        folder = self.folder() / "profile"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        return folder

    def trace_path(self):
        """Where the profile's trace goes: beside the record (the runner keeps it with the executed notebook), or
        in the run's scratch folder when there is no record."""
        if self.record_path:
            return records.trace_path(self.record_path)
        return self.folder() / "trace.json.gz"

    def sweep(self, make_step, batch_sizes: str, **kwargs) -> dict | None:
        """The steady state at each batch size asked for (support.timing.sweep), within the task's time budget."""
        kwargs.setdefault("device_memory", self.device_memory)
        result = timing.sweep(make_step, batch_sizes, budget_s=self.settings.sweep_budget_s, sync=self.sync, **kwargs)
        self.fields["sweep"] = result
        return result

    def agree(self, check: str, outputs, expected) -> dict:
        """Two models' outputs on one batch (a restored model, the ONNX graph) within the run's precision."""
        result = agree(check, outputs, expected, precision=self.precision)
        self.fields.update(result)
        return result

    def unavailable(self, check: str, reason) -> dict:
        """Record that an agreement check (e.g. "onnx": ONNX Runtime cannot run the exported graph) could not run,
        and why (an exception or a sentence), in place of its comparison; printed in one line."""
        self.fields[check] = {"unavailable": str(reason)}
        print(f"{check}: unavailable: {reason}")
        return self.fields[check]

    def onnx(self, export, run, x, expected, *, documented: str | None = None, batch=None) -> dict:
        """The export check: `export(path)` writes the model's ONNX graph and `run(path, x)` returns ONNX Runtime's
        outputs on `x` (both the learner's functions, from the notebook's export section), compared with the
        framework's `expected` outputs as `onnx`. Where the exporter or ONNX Runtime fails, the failure is the
        record's, in its own words (`unavailable`), under a mixed or reduced precision (the graph holds types ONNX
        Runtime's CPU kernels lack) or where the notebook `documented` why this run cannot export; a float32
        failure nobody documented is raised, as a defect. `batch` (the run's batch, in the graph's input layout):
        in float32, ONNX Runtime's own throughput on it follows (`onnx_runtime_throughput`)."""
        path = self.folder() / "model.onnx"
        try:
            export(path)
            outputs = run(path, x)
        except Exception as error:  # the exporter's and ONNX Runtime's errors have no common base class
            if self.precision == "fp32" and documented is None:
                raise
            words = f"{type(error).__name__}: {error}".strip().splitlines()[0][:400]
            return self.unavailable("onnx", f"{documented}: {words}" if documented else words)
        result = self.agree("onnx", outputs, expected)
        if batch is not None and self.precision == "fp32":
            self.onnx_runtime_throughput(path, batch)
        return result

    def onnx_runtime_throughput(self, path, batch) -> dict:
        """ONNX Runtime, the inference runtime a deployment would run the exported graph in, timed on `batch` on
        this machine as the task's throughput is (support.timing.benchmark: the task's warm-up and timed batches,
        else 2 and 7): the reference the results show beside the framework's own number. One session, made once,
        with ONNX Runtime's defaults (its threads: one a physical core) and the best provider this build has.
        A graph ONNX Runtime cannot run at this batch (an export with a fixed batch dimension) is recorded as
        `onnxruntime: {"unavailable": ...}` in its own words."""
        import numpy as np
        import onnxruntime as ort

        providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in ort.get_available_providers()]
        try:
            session = ort.InferenceSession(str(path), providers=providers)
            feed = {session.get_inputs()[0].name: np.ascontiguousarray(batch, dtype=np.float32)}
            summary = timing.benchmark(
                lambda: session.run(None, feed),
                repeats=getattr(self.settings, "n_batches", timing.MIN_REPEATS),
                warmup=getattr(self.settings, "warmup_batches", 2),
                samples=len(batch),
            )
        except Exception as error:  # ONNX Runtime's errors have no common base class
            return self.unavailable("onnxruntime", " ".join(f"{type(error).__name__}: {error}".split())[:300])
        provider = session.get_providers()[0]
        print(f"ONNX Runtime {ort.__version__} ({provider}) on the exported graph: {timing.describe(summary)}")
        self.fields["onnxruntime"] = {**summary, "version": ort.__version__, "provider": provider}
        return self.fields["onnxruntime"]

    # --- the operator benchmarks (support/operators.py) ---------------------------------------------------------
    def operators(self, make, *, modes: tuple, dtypes: tuple = ops.DTYPES) -> list[dict]:
        """Time every measurement of the operator benchmarks' plan at this profile (support.operators.plan: each
        operation's sizes, forward and train, `dtypes`, the framework's `modes`, its first the default): `make(case)`
        builds the call that runs one (the notebook's: its inputs made, its gradients asked for, compiled in a
        compiled mode) and support.timing.calibrated times it. A dtype this framework or device does not compute is
        recorded `unsupported` with `reason`; a call `make` cannot build raises support.operators.Unavailable with
        the framework's words and is recorded `unavailable`; any other float32 failure is raised, as a defect. A
        call slower than the profile's `call_ceiling_s` (its median) ends its ladder: the larger rungs of that
        operation, direction, dtype and mode are recorded `skipped`, with the time that ended it.
        Prints one line per operation, direction, dtype and mode (its GFLOP/s up the ladder); the record's timing
        is the dispatch floor, the first mode's smallest float32 add."""
        settings, results, floor, ended = self.settings, [], None, {}
        for case in ops.plan(settings, modes, gpu=self.gpu, dtypes=dtypes):
            entry = {
                "op": case.op,
                "size": case.size,
                "dims": case.dims,
                "model": case.model,
                "direction": case.direction,
                "dtype": case.dtype,
                "mode": case.mode,
                "flops": case.flops,
            }
            why = self.reason(ops.PRECISION_OF[case.dtype])
            if why:
                results.append({**entry, "status": "unsupported", "reason": why})
                continue
            ladder = (case.op, case.direction, case.dtype, case.mode)
            if ladder in ended:
                results.append({**entry, "status": "skipped", "reason": ended[ladder]})
                continue
            try:
                summary = timing.calibrated(
                    make(case),
                    repeats=settings.repeats,
                    budget_s=settings.budget_s,
                    warmup=settings.warmup_calls,
                    sync=self.sync,
                )
            except ops.Unavailable as error:
                results.append({**entry, "status": "unavailable", "reason": str(error)})
                continue
            except Exception as error:  # a framework's errors have no common base class
                if case.dtype == "float32":
                    raise
                words = " ".join(f"{type(error).__name__}: {error}".split())[:300]
                results.append({**entry, "status": "unavailable", "reason": words})
                continue
            results.append({**entry, "status": "ok", **ops.timed_fields(summary, case.flops)})
            floor = floor or (summary if ops.is_floor(case, modes) else None)
            if settings.call_ceiling_s and summary["median_s"] > settings.call_ceiling_s:
                ended[ladder] = ops.over_ceiling(case, summary["median_s"], settings.call_ceiling_s)
        print(ops.describe(results))
        if floor is None:
            raise RuntimeError("the operator benchmarks' plan has no float32 add in the first mode: the floor")
        self.fields.update(operators=results, timing=floor, first_step_s=floor["first_s"])
        return results

    def hyperparameters(self, **values) -> dict:
        """Check that the hyperparameters the notebook's learner's path names (`learning_rate=...`, `batch_size=...`)
        are the profile's (`settings.lr`, `settings.batch_size`, ...): a value that differs is a ValueError of one
        line naming it, the notebook's value and the profile's. Recorded as the `hyperparameters` field."""
        names = {"learning_rate": "lr"}
        for name, value in values.items():
            field = names.get(name, name)
            if not hasattr(self.settings, field):
                raise ValueError(
                    f"hyperparameter {name!r}: the {self.task} profile has no {field!r}; "
                    f"it has {', '.join(f.name for f in dataclasses.fields(self.settings))}"
                )
            if getattr(self.settings, field) != value:
                raise ValueError(
                    f"hyperparameter {name}={value!r} in the notebook, but the {self.settings.profile!r} "
                    f"profile of {self.task} says {field}={getattr(self.settings, field)!r}: "
                    "change the notebook's value or the profile (support/params.py)"
                )
        self.fields["hyperparameters"] = dict(values)
        print(
            "hyperparameters: "
            + ", ".join(f"{k}={v}" for k, v in values.items())
            + f" (the {self.settings.profile!r} profile's)"
        )
        return self.fields["hyperparameters"]

    def parity(self, outputs, weights, x) -> dict:
        """This model's outputs on the shared weights against the numpy reference (support.parity)."""
        from support import parity as shared

        result = shared.compare(self.task, outputs, weights, x, precision=self.precision)
        self.fields.update(result)
        return result

    def data_parallel(self, several: dict, one: dict, before: dict, *, batch_norm: str) -> dict:
        """Data parallelism's check (support.parity.data_parallel): the trainable parameters after one plain-SGD
        step on the run's devices (`several`) against the same step on one device (`one`), from the weights
        `before`, each {name: numpy array}; recorded as the `data_parallel` field."""
        from support import parity as shared

        result = shared.data_parallel(
            several, one, before, devices=self.devices, batch_norm=batch_norm, precision=self.precision
        )
        self.fields.update(result)
        return result

    def initialisation(self, arrays: dict, layout: str) -> dict:
        """The initial weights' statistics per array, in the framework's names and layout ('oi': (out, in, ...)
        like PyTorch, 'io': (..., in, out) like Keras), checked against the task's scheme (support.init)."""
        stats = initial.stats(arrays, layout)
        problems = initial.check(self.task, stats, self.settings)
        print(
            f"initialisation: {len(stats)} arrays, "
            + ("as the task's scheme says" if not problems else "NOT as the scheme says: " + "; ".join(problems))
        )
        self.fields["init"] = stats
        return stats

    def compile_s(self, first_step_s: float) -> float | None:
        """The compilation's time where this run compiles: its first step less a steady one."""
        steps = self.fields.get("steps") or self.fields.get("timing") or self.epochs.summary()
        return timing.lazy_compile_s(first_step_s, steps) if self.compiled else None

    def first_step_s(self) -> float:
        """The first training step's time, from the epoch laps: the warm-up epoch less its other steps at the
        steady epochs' pace (the input pipeline's share included; compilation and autotuning fall in it)."""
        summary = self.epochs.summary()
        n = self.steps_per_epoch or 1
        warm = summary["warmup_s"][0] if summary["warmup_s"] else summary["median_s"]
        # at least one steady step: on a loaded machine the warm-up epoch can run faster than the median one
        return max(warm - (n - 1) / n * summary["median_s"], summary["median_s"] / n)

    def write(
        self, *, metrics: dict, data: str, n_parameters: int, curve=None, device_peak_bytes=None, **extra
    ) -> dict:
        """Write this run's record for the runner (with record_path None, only print it): a training run's
        epochs and steady state, or an inference run's first call and throughput."""
        first = self.fields.get("first_step_s") or self.first_step_s()
        return records.write(
            self.record_path,
            task=self.task,
            framework=self.framework,
            params=self.settings,
            data=data,
            timing=self.fields.get("timing") or self.epochs.summary(),
            steps=self.fields.get("steps"),
            first_step_s=first,
            curve=curve,
            metrics=metrics,
            n_parameters=n_parameters,
            environment=self.environment,
            device_peak_bytes=device_peak_bytes,
            precision=self.precision,
            compilation=self.compilation,
            compile_s=self.compile_s(first),
            sweep=self.fields.get("sweep"),
            variant=self.variant,
            extra={
                k: v
                for k, v in {**self.fields, **extra}.items()
                if k not in ("steps", "sweep", "timing", "first_step_s")
            },
        )
