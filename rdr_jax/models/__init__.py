"""Flax NNX models: WideResNet-28-2 (Ch. 4), UNet-ResNet34 and TransUNet (Ch. 5)."""
