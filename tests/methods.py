"""The one list of skeleton-selection methods that drives the generic ID/CUR tests
(``tests/test_methods_generic.py``, ``tests/test_cur.py``), as lineax's ``tests/helpers.py``
drives its solver tests: a new pivot rule or sketch is one entry here, and every generic
test then checks it."""

import rdr_jax as R

#: name -> Method: the thesis' seven algorithms, each other sketch, the sketch interpolation,
#: the deterministic full-matrix CPQR baseline and adaptive randomized pivoting (issue 33)
METHODS = {
    "Rand-LUPP": R.Method("Rand-LUPP"),
    "Rand-LUPP-1piter": R.Method("Rand-LUPP-1piter"),
    "Rand-CPQR": R.Method("Rand-CPQR"),
    "Rand-CPQR-1piter": R.Method("Rand-CPQR-1piter"),
    "RSVD-DEIM": R.Method("RSVD-DEIM"),
    "RSVD-LS": R.Method("RSVD-LS"),
    "SRCUR": R.Method("SRCUR"),
    "lupp/srtt": R.Method("lupp", sketch="srtt"),
    "cpqr/sparse_sign": R.Method("cpqr", sketch="sparse_sign"),
    "lupp/interp=sketch": R.Method("lupp", interp="sketch"),
    "full_cpqr": R.Method(R.FullCPQR()),
    "arp": R.Method(R.ARP()),
}
#: the randomized ones (their skeletons depend on the key)
RANDOMIZED = [name for name, m in METHODS.items() if not isinstance(m.pivot, R.FullCPQR)]

#: the matrix shape and rank the generic tests share with ``tests/test_cur.py``: a
#: decomposition's compiled program depends only on shape, dtype, rank bucket and method, so
#: an eager call another file already made is read from the suite's compilation cache instead
#: of being compiled again (CI time)
SHAPE, RANK = (90, 70), 12
