"""Shared, framework-neutral helpers for the DL Rosetta notebooks.

Only what a reader did not come to learn lives here: the tasks (`tasks`) and frameworks (`frameworks`),
parameters (`params`), data (`data`), each task's initial distributions and their check (`init`), timing
(`timing`), result records (`records`), the environment (`env`), whole files and locks (`files`), the
parity weights and reference (`parity`), and each notebook's measurement part (`measure`: one module per
framework, which a notebook imports by name). Every line of model, initialisation, loss, optimiser,
training loop and device handling stays in the notebooks.
numpy and the standard library only, so the same code runs in every kernel (numpy 2.x and
numpy 1.23 alike); only `support.measure.<framework>` imports its framework.

Importing `support` points the frameworks' caches (Keras, torch hub, inductor, matplotlib,
IPython) at the project's `.cache/` folder unless the caller already chose a place, so that
notebooks leave nothing in the home directory. Import it before the framework.
"""

from support import env as _env

_env.use_project_cache()
