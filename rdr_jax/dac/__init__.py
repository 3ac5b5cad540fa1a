"""Chapter 4: data augmentation consistency (DAC) regularization vs DA-ERM.

Submodules: ``linear`` (the linear-regression theory toolkit, Thm 4.1 and the soft-penalty
bounds), ``domain_adaptation`` (App. ``apx:case_ood``), ``two_layer`` (two-layer ReLU,
Sec. ``sec:example_2relu``), ``randaugment`` (the 14-op RandAugment of App.
``apdx:exp_detail``) and ``deep`` (DA-ERM / DAC training of deep classifiers).
"""
