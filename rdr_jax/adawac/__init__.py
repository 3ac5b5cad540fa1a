"""Chapter 5: AdaWAC -- adaptively weighted augmentation consistency for segmentation.

Submodules: ``transform`` (the optax mirror-ascent transform for the per-sample weights beta,
``alg:srw_dac``), ``losses`` (cross-entropy, dice, encoder consistency, the WAC objective),
``metrics`` (per-volume DSC and HD95), ``data`` (Synapse / ACDC loaders, subsets),
``phantom`` / ``cardiac_phantom`` (synthetic CT / cine-MRI stand-ins), ``augment`` (the
two-view augmentation), ``train`` (AdaWAC and baselines: the step, on the loop both chapters
share, :func:`rdr_jax.training.fit`), ``configs`` (the experiment configs; leaves that import
no trainer), ``plots`` (beta/CE/consistency heatmaps and segmentation overlays; imported
separately because it loads matplotlib).
"""

from rdr_jax.adawac.augment import (AugmentParams, TwoViews, augment, batch_two_views,
                                    two_views)
from rdr_jax.adawac.data import (SegmentationData, SliceDataset, VolumeDataset, load_acdc,
                                 load_synapse, make_subset)
from rdr_jax.adawac.losses import (WACAux, consistency, cross_entropy, dice_loss,
                                   wac_dice_loss, wac_objective)
from rdr_jax.adawac.metrics import (MetricsSummary, VolumeMetrics, aggregate_metrics,
                                    predict_volume, volume_metrics)
from rdr_jax.adawac.cardiac_phantom import cardiac_phantom_cases
from rdr_jax.adawac.phantom import phantom_cases
from rdr_jax.adawac.transform import (BetaMirrorAscentState, beta_gradient,
                                      beta_mirror_ascent, init_beta)

__all__ = ["AugmentParams", "TwoViews", "augment", "batch_two_views", "two_views",
           "SegmentationData", "SliceDataset", "VolumeDataset", "load_acdc", "load_synapse",
           "make_subset", "WACAux", "consistency", "cross_entropy", "dice_loss",
           "wac_dice_loss", "wac_objective", "MetricsSummary", "VolumeMetrics",
           "aggregate_metrics", "predict_volume", "volume_metrics", "phantom_cases",
           "cardiac_phantom_cases",
           "BetaMirrorAscentState", "beta_gradient", "beta_mirror_ascent", "init_beta"]
