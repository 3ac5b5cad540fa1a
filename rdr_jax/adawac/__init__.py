"""Chapter 5: AdaWAC, adaptively weighted augmentation consistency for segmentation.

Submodules: ``transform`` (the beta step), ``losses``, ``metrics``, ``data``, ``phantom`` /
``cardiac_phantom``, ``augment``, ``train`` (on :func:`rdr_jax.training.fit`), ``configs``,
``plots`` (imported separately: it loads matplotlib).
"""

from rdr_jax.adawac.augment import (AugmentParams, TwoViews, augment, batch_two_views,
                                    two_views)
from rdr_jax.adawac.data import (SegmentationData, SliceDataset, VolumeDataset, load_acdc,
                                 load_synapse, make_subset)
from rdr_jax.adawac.losses import (WACAux, WACLossOptions, consistency, cross_entropy,
                                   dice_loss, wac_dice_loss, wac_objective)
from rdr_jax.adawac.metrics import (MetricsSummary, VolumeMetrics, aggregate_metrics,
                                    predict_volume, volume_metrics)
from rdr_jax.adawac.cardiac_phantom import CardiacPhantomOptions, cardiac_phantom_cases
from rdr_jax.adawac.mni152 import load_mni152
from rdr_jax.adawac.phantom import PhantomOptions, phantom_cases
from rdr_jax.adawac.transform import (BetaMirrorAscentState, beta_gradient,
                                      beta_mirror_ascent, init_beta)

__all__ = ["AugmentParams", "TwoViews", "augment", "batch_two_views", "two_views",
           "SegmentationData", "SliceDataset", "VolumeDataset", "load_acdc", "load_synapse",
           "make_subset", "WACAux", "consistency", "cross_entropy", "dice_loss",
           "wac_dice_loss", "wac_objective", "WACLossOptions", "MetricsSummary", "VolumeMetrics",
           "aggregate_metrics", "predict_volume", "volume_metrics", "phantom_cases",
           "cardiac_phantom_cases", "PhantomOptions", "CardiacPhantomOptions", "load_mni152",
           "BetaMirrorAscentState", "beta_gradient", "beta_mirror_ascent", "init_beta"]
