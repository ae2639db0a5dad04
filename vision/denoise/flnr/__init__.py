"""Fast Local Neural Regression (FLNR): a small network writes the guides of the local regression.

Salmi, Csefalvay and Imber, "Fast Local Neural Regression for Low-Cost, Path Traced Lambertian Global
Illumination", 2024. FLR (:mod:`vision.denoise.flr`) explains the demodulated radiance in every window
as an affine function of the guide buffers. Two things limit it: where the light changes without a
buffer changing (shadows, contact shadows, falloff) no guide can follow it, and with 8 guides every
window fits 9 coefficients per channel from noisy samples, so the noise left grows with the number of
guides. FLNR keeps the regression and lets a network write *few, better* guides:

1. the signal model is FLR's: emission subtracted, albedo divided out (see :func:`.buffers.demodulate`);
2. the buffers are laid out as :data:`FLNR_LAYOUT` (normal, log-depth, AO, albedo: 8 channels; a missing
   buffer is a zero channel) and standardised per frame;
3. :class:`FLNRNet` sees cell statistics (4 x 4 pixel means of those guides, of ``log1p`` of the noisy
   demodulated colour and of the emitter mask, and the cell's spread of log-luminance), runs a small
   U-Net at 1/8 to 1/32 resolution and returns a latent code and radius logits per 4 x 4 cell;
4. a per-pixel MLP (``guide head``) maps the full-resolution guides and the bilinearly upsampled latent
   code to ``Q`` (default 4) *learned guides*: sharp wherever the buffers have edges, and free to carry
   what the network infers about the light (a shadow, a falloff) between them;
5. the regression fits the noisy signal on those Q guides (:func:`vision.kernels.local_linear_fit` on
   4 x 4 cells, a learned ridge weight per guide) at radii 4, 8 and 16 at once, blends the fits per cell
   with the network's softmax weights (small windows where the guides explain the light, large ones
   where noise dominates; a blend of local linear models is a local linear model), applies them at full
   resolution (:func:`vision.kernels.local_linear_apply`), clamps, remodulates and adds the emission;
6. with ``antialias`` (the bundled weights have it) the light is blended towards its 3 x 3 mean where the
   albedo has an edge, with a weight the guide head writes (:func:`antialias`): the buffers are one ray
   through each pixel centre, the reference a mean over the pixel, and at an edge no regression on the
   centre's buffers can mix the two surfaces' light.

So the network never outputs radiance: every output pixel is still a local affine function of guides
(with ``antialias``, a blend of its own and its neighbours' ones), fitted to this frame's samples, which
is what keeps the result faithful where the network is unsure.
With Q = 4 guides each window fits 5 coefficients instead of FLR's 9, and the guides are better, so
the fit is both less noisy and less biased. The chain is differentiable end to end (the regression has
closed-form backwards) and is trained on the denoised result (``vision train-denoiser``).

Cost: the 3 x 3 convolutions run at 1/64 of the pixels and below; per pixel there are the guide head
(8 buffer channels -> 16 (8 in the bundled weights), plus the upsampled code, -> 4), one pass forming the
cell moments of the Q guides and the signal (shared by the three radii; from 2 x 2 means with
``fit_down=2``, as bundled) and one apply. The fit's solves run on the cell grid. On CPU without autograd
(inference) the demodulation, the guide head, the cell moments, solves and apply and the last steps run row
by row, so their intermediates (the hidden layer, the centred samples) stay in cache: numba loops in float32
(each stage's ``*_numba`` module, :mod:`vision.kernels.local_linear.cpu_path`), bands of rows on
``torch.get_num_threads()`` workers otherwise.

Weights: ``weights=None`` loads the bundled ``assets/weights/flnr.safetensors``; a path, a state dict
(as :meth:`FLNR.state_dict` returns) or an :class:`FLNR` instance also work. The file's metadata holds the
network configuration (``vision.flnr.config``, JSON), and ``vision train-denoiser`` adds the training
command, steps and the validation PSNR.

The package: one module per stage, named after the stage's registry op (op ``denoise.flnr.X`` in ``X.py``: the
op's call, its PyTorch and band paths and their registration; its numba loops beside it in ``X_numba.py``, loaded
only when that path runs): :mod:`.prepare` (the demodulation), :mod:`.cells` (the guide layout, the cell statistics
and the history input: the network's input; also the log's op ``denoise.flnr.log1p``), :mod:`.head` (the guide
head), :mod:`.finish` (the last steps, the antialias blend; also ``denoise.flnr.mean3`` and
``denoise.flnr.contrast``), :mod:`.detail` (the detail blend). Stage functions take tensors (and the layer they
apply), never the model. Around them:

==================  ==========================================================================================
module              holds
==================  ==========================================================================================
:mod:`.model`       :class:`FLNR`: the stages wired in ``forward``, the weights file's reading and writing
:mod:`.network`     the cell network :class:`FLNRNet`
:mod:`.surgery`     pruning, widening, added blends and the added history input, for fine-tuning
:mod:`.config`      bounds on a configuration read from a file, the safetensors check
:mod:`.hub`         ``save_pretrained`` / ``from_pretrained`` on local folders
:mod:`.loading`     :func:`load_flnr`, the bundled weights, :func:`placed`, :func:`read_metadata`
:mod:`.functional`  :func:`flnr`, :func:`flnr_tiled`
:mod:`.rows_numba`  what the stages' numba loops share: the guide buffers read row by row
==================  ==========================================================================================

ARCHITECTURE.md, "Adding a denoiser stage", is the recipe for a new one.
"""
from __future__ import annotations

from .cells import FLNR_LAYOUT, cell_inputs, frame_stats
from .detail import detail_blend
from .finish import antialias, local_contrast
from .functional import flnr, flnr_tiled
from .loading import load_flnr, placed, read_metadata
from .model import DEFAULT_CONFIG, FLNR, parameter_count
from .network import FLNRNet

__all__ = ["FLNR", "FLNRNet", "flnr", "flnr_tiled", "load_flnr", "placed", "read_metadata", "parameter_count",
           "DEFAULT_CONFIG", "FLNR_LAYOUT", "cell_inputs", "frame_stats", "antialias", "local_contrast", "detail_blend"]
