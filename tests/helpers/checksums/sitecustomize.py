"""Imported at the start of every Python process whose path has this folder (the format tests
put it on PYTHONPATH for their benchmark subprocess, which hands it on to its training
processes): torchvision's CIFAR and STL-10 modules take the test's small files, whose bytes
cannot match the published checksums. The one place the tests patch them."""

from torchvision.datasets import cifar, stl10

cifar.check_integrity = stl10.check_integrity = lambda *args, **kwargs: True
