"""Dense-task losses and metrics against values worked out by hand on tiny 1 x N images (the numbers in
the comments), with invalid-pixel masks; task decoding, flip TTA signs and the mean baselines."""
import math

import pytest
import torch

from vision.dense import (TASKS, alpha_loss, alpha_metrics, albedo_metrics, binary_loss, binary_metrics,
                          depth_metrics, get_task, gradient_matching_loss, median_scale, l1_loss, normal_loss, normal_metrics, predict_with_flip,
                          scale_shift_invariant_loss, semantic_loss, semantic_metrics, silog_loss)

LN2, LN3 = math.log(2), math.log(3)


def row(*values, dtype=torch.float64):
    """A (1, 1, 1, N) image from the given pixel values."""
    return torch.tensor(values, dtype=dtype).reshape(1, 1, 1, -1)


def rows(*images, dtype=torch.float64):
    return torch.cat([row(*v, dtype=dtype) for v in images])


def mask(*values):
    return torch.tensor(values, dtype=torch.bool).reshape(1, 1, 1, -1)


# ------------------------------------------------------------------------------------------- depth

def test_silog_by_hand_with_invalid_pixels():
    # image 0: target 1, 1, 1, (0 = no surface); pred log 1, 1, 0.5, (7 ignored): d = 1, 1, 0.5
    #   mean d = 2.5/3, mean d^2 = 2.25/3 = 0.75 -> sqrt(0.75 - 0.85 * (2.5/3)^2) = sqrt(0.1597222) = 0.3996526
    # image 1: target e, e, 0, 0; pred log 1, 3: d = 0, 2: mean 1, mean d^2 2 -> sqrt(2 - 0.85) = 1.0723805
    pred = rows((1, 1, 0.5, 7), (1, 3, -5, 9))
    target = rows((1, 1, 1, 0), (math.e, math.e, 0, 0))
    loss = silog_loss(pred, target)
    assert float(loss) == pytest.approx((0.3996526 + 1.0723805) / 2, abs=1e-6)
    # lambda = 0 is the log RMSE: image 0 sqrt(0.75) = 0.8660254, image 1 sqrt(2) = 1.4142136
    assert float(silog_loss(pred, target, variance_focus=0.0)) == pytest.approx((0.8660254 + 1.4142136) / 2, abs=1e-6)
    # an explicit mask dropping pixel 1 of image 1: d = 0 alone -> 0 (up to the 1e-12 floor under the sqrt)
    valid = torch.cat([mask(1, 1, 1, 0), mask(1, 0, 0, 0)])
    assert float(silog_loss(pred, target, valid)) == pytest.approx(0.3996526 / 2, abs=1e-5)
    # the same through the task, whose default mask is target > 0
    assert float(TASKS["depth"].loss(pred, target)) == pytest.approx(float(loss), abs=1e-12)


def test_scale_shift_invariant_loss_by_hand():
    # pred 1, 2, 3 against 2, 4, 7 (4th pixel invalid): s = cov / var = 5 / 2, t = 13/3 - 5 = -2/3
    # fitted 11/6, 26/6, 41/6 -> residuals -1/6, 2/6, -1/6 -> mean square 6/36 / 3 = 1/18
    pred, target = row(1, 2, 3, 100), row(2, 4, 7, -50)
    assert float(scale_shift_invariant_loss(pred, target, mask(1, 1, 1, 0))) == pytest.approx(1 / 18, abs=1e-12)
    # an affine copy of the target costs nothing
    assert float(scale_shift_invariant_loss(3 * target - 1, target)) == pytest.approx(0, abs=1e-12)


def test_depth_metrics_by_hand():
    # image 0: pred 1, 2, 3 vs target 1, 1, 4 (4th: target 0, invalid)
    #   AbsRel (0 + 1 + 1/4)/3 = 0.4166667, RMSE sqrt((0 + 1 + 1)/3) = 0.8164966, delta1: ratios 1, 2, 4/3 -> 1/3
    # image 1: pred 2, 3 vs 2, 2.5: AbsRel (0 + 0.2)/2 = 0.1, RMSE sqrt(0.25/2) = 0.3535534, delta1: 1, 1.2 -> 1
    pred = rows((1, 2, 3, 9), (2, 3, 1, 1))
    target = rows((1, 1, 4, 0), (2, 2.5, 0, 0))
    m = depth_metrics(pred, target)
    assert m["abs_rel"] == pytest.approx((0.4166667 + 0.1) / 2, abs=1e-7)
    assert m["rmse"] == pytest.approx((0.8164966 + 0.3535534) / 2, abs=1e-7)
    assert m["delta1"] == pytest.approx(2 / 3, abs=1e-12)
    # a mask keeping only pixel 1 of image 0 (image 1 has none left and does not count): 1, 1, 0
    valid = torch.cat([mask(0, 1, 0, 0), mask(0, 0, 0, 0)])
    assert depth_metrics(pred, target, valid) == pytest.approx({"abs_rel": 1.0, "rmse": 1.0, "delta1": 0.0})
    # through the task: decode = exp of the log-depth output
    task = TASKS["depth"]
    assert task.metrics(task.decode(torch.log(pred)), target) == pytest.approx(m, abs=1e-6)
    assert all(math.isnan(v) for v in depth_metrics(pred, target, torch.zeros_like(valid)).values())


def test_relative_depth_task_aligns_disparity():
    target = row(1, 2, 4, 0)
    disparity = row(1, 0.5, 0.25, 0)
    task = TASKS["relative-depth"]
    pred = 3 * disparity + 1  # an affine map of the true disparity: perfect after alignment
    assert float(task.loss(pred, target)) == pytest.approx(0, abs=1e-12)
    m = task.metrics(task.decode(pred), target)
    assert m["abs_rel"] == pytest.approx(0, abs=1e-6) and m["delta1"] == 1.0


def test_median_scale_by_hand():
    # image 0: target medians over valid pixels (2, 4, 8, 100-invalid) -> 4; prediction (1, 2, 3, 9) -> 2: x2
    # image 1: even count (valid 3, 5): target median (6 + 10) / 2 = 8, prediction (3 + 5) / 2 = 4: x2
    pred = rows((1, 2, 3, 9), (3, 5, 7, 7))
    target = rows((2, 4, 8, 0), (6, 10, 0, 0))
    got = median_scale(pred, target, target > 0)
    torch.testing.assert_close(got, rows((2, 4, 6, 18), (6, 10, 14, 14)), rtol=0, atol=1e-12)
    assert depth_metrics(got, target, target > 0)["abs_rel"] == pytest.approx((0 + 0 + 2 / 8) / 3 / 2, abs=1e-12)
    # no valid pixel, or a zero median prediction: unscaled
    torch.testing.assert_close(median_scale(pred, target, torch.zeros_like(target, dtype=torch.bool)), pred)
    torch.testing.assert_close(median_scale(row(0, 0, 1), row(1, 2, 3)), row(0, 0, 1))


# ------------------------------------------------------------------------------------------- normals

def normals(*vectors):
    """A (1, 3, 1, N) map of the given 3-vectors."""
    return torch.tensor(vectors, dtype=torch.float64).T.reshape(1, 3, 1, -1)


def test_normal_loss_by_hand():
    # targets x, x, x, (0: no surface); preds 2x (0 deg), 3y (90 deg), x + y (45 deg), anything
    # mean(1 - cos) = (0 + 1 + (1 - 1/sqrt 2)) / 3 = 0.4309644; mean angle = (0 + pi/2 + pi/4) / 3 = 0.7853982
    pred = normals((2, 0, 0), (0, 3, 0), (1, 1, 0), (5, 5, 5))
    target = normals((1, 0, 0), (1, 0, 0), (1, 0, 0), (0, 0, 0))
    assert float(normal_loss(pred, target)) == pytest.approx(0.4309644 + 0.7853982, abs=1e-6)
    assert float(normal_loss(pred, target, angular_weight=0.0)) == pytest.approx(0.4309644, abs=1e-6)
    # an explicit mask keeping the 90 degree pixel only: 1 + pi/2
    assert float(normal_loss(pred, target, mask(0, 1, 0, 1))) == pytest.approx(1 + math.pi / 2, abs=1e-6)
    assert float(TASKS["normals"].loss(pred, target)) == pytest.approx(0.4309644 + 0.7853982, abs=1e-6)


def test_normal_loss_gradient_is_finite_at_zero_error():
    pred = normals((1, 0, 0), (0, 1, 0)).requires_grad_(True)
    normal_loss(pred, normals((1, 0, 0), (0, 1, 0))).backward()
    assert torch.isfinite(pred.grad).all()


def test_normal_metrics_by_hand():
    # errors 0, 90, 45, 20 degrees (5th pixel has no surface): mean 38.75, median (20 + 45)/2 = 32.5,
    # below 11.25: 1/4, below 22.5: 2/4, below 30: 2/4
    c, s = math.cos(math.radians(20)), math.sin(math.radians(20))
    pred = normals((2, 0, 0), (0, 3, 0), (1, 1, 0), (c, s, 0), (1, 0, 0))
    target = normals((1, 0, 0), (1, 0, 0), (1, 0, 0), (1, 0, 0), (0, 0, 0))
    m = normal_metrics(pred, target)
    assert m == pytest.approx({"mean_angle": 38.75, "median_angle": 32.5, "within_11.25": 25.0,
                               "within_22.5": 50.0, "within_30": 50.0}, abs=1e-4)
    # mask: only the 45 and 90 degree pixels
    m = normal_metrics(pred, target, mask(0, 1, 1, 0, 0))
    assert m == pytest.approx({"mean_angle": 67.5, "median_angle": 67.5, "within_11.25": 0.0,
                               "within_22.5": 0.0, "within_30": 0.0}, abs=1e-4)


def test_normals_flip_negates_x():
    task = TASKS["normals"]
    raw = normals((1, 2, 3), (4, 5, 6))
    assert task.flip(raw).flatten().tolist() == [-4, -1, 5, 2, 6, 3]  # W reversed, x negated
    assert TASKS["depth"].flip(row(1, 2)).flatten().tolist() == [2, 1]
    # TTA with an exactly flip-equivariant model returns its prediction unchanged: the mirrored scene's
    # normals are the mirrored map with x negated
    image = torch.rand(1, 3, 1, 2, dtype=torch.float64)
    truth = normals((0.6, 0, 0.8), (-0.8, 0, 0.6))
    mirrored = truth.flip(-1) * torch.tensor([-1.0, 1, 1], dtype=torch.float64)[:, None, None]
    predict = lambda im: truth if torch.equal(im, image) else mirrored  # noqa: E731
    torch.testing.assert_close(predict_with_flip(task, predict, image), truth)
    # without the sign flip the x channel would average to zero
    assert not torch.allclose(predict_with_flip(TASKS["depth"], predict, image), truth)


# ------------------------------------------------------------------------------------------- gradient matching

def test_gradient_matching_by_hand():
    r = row(0, 1, 3, 3, 7)
    # scale 0: |1|, |2|, |0|, |4| -> mean 1.75; H = 1: no vertical pairs
    assert float(gradient_matching_loss(r, scales=1)) == pytest.approx(1.75, abs=1e-12)
    # scale 1 (every 2nd pixel: 0, 3, 7): |3|, |4| -> 3.5; mean over the scales (1.75 + 3.5) / 2
    assert float(gradient_matching_loss(r, scales=2)) == pytest.approx(2.625, abs=1e-12)
    # pixel 2 invalid: only pairs (0, 1) and (3, 4) count: (1 + 4) / 2
    assert float(gradient_matching_loss(r, mask(1, 1, 0, 1, 1), scales=1)) == pytest.approx(2.5, abs=1e-12)
    # 2 x 2: x pairs |1|, |3| -> 2; y pairs |2|, |4| -> 3
    sq = torch.tensor([[0.0, 1.0], [2.0, 5.0]], dtype=torch.float64).reshape(1, 1, 2, 2)
    assert float(gradient_matching_loss(sq, scales=1)) == pytest.approx(5.0, abs=1e-12)
    # an offset of the residual is free (a global depth scale in log space)
    assert float(gradient_matching_loss(sq + 7, scales=1)) == pytest.approx(5.0, abs=1e-12)
    with pytest.raises(ValueError, match="scales"):
        gradient_matching_loss(r, scales=0)


def test_depth_and_normal_tasks_add_the_gradient_term():
    t = row(1.0, 2.0, 4.0)
    pred = torch.log(t) + row(0, 0.5, 1.5)
    # 4 scales: residual differences 0.5, 1.0 -> 0.75; every 2nd pixel (0, 1.5) -> 1.5; single pixels: no pairs
    base, task = TASKS["depth"], get_task("depth", gradient_weight=2.0)
    assert float(task.loss(pred, t) - base.loss(pred, t)) == pytest.approx(2.0 * (0.75 + 1.5) / 4, abs=1e-12)
    # the middle pixel has no depth (0, or NaN): no pair at scale 0, pixels 0 and 2 still pair at scale 1;
    # the gradient stays finite
    for bad in (0.0, float("nan")):
        tb = row(1.0, bad, 4.0)
        p = pred.clone().requires_grad_(True)
        loss = task.loss(p, tb)
        assert float(loss.detach() - base.loss(pred, tb)) == pytest.approx(2.0 * 1.5 / 4, abs=1e-12)
        loss.backward()
        assert torch.isfinite(p.grad).all()
    # normals: the prediction is normalised first; residuals (0, 0, 0) and (-1, 1, 0): mean over 3 channels 2/3
    # at scale 0, no pair at the 3 coarser scales
    target = normals((1, 0, 0), (1, 0, 0))
    pred_n = normals((2, 0, 0), (0, 3, 0))
    ntask = get_task("normals", gradient_weight=3.0)
    diff = ntask.loss(pred_n, target) - TASKS["normals"].loss(pred_n, target)
    assert float(diff) == pytest.approx(3.0 * (2 / 3) / 4, abs=1e-12)


# ------------------------------------------------------------------------------------------- alpha

def test_alpha_loss_by_hand():
    # alpha 0.2, 0.5, 1.0 vs target 0, 0.5, 0.5: L1 = 0.7/3 = 0.2333333
    # x differences: alpha 0.3, 0.5; target 0.5, 0 -> |0.2|, |0.5| -> mean 0.35; no vertical pairs (H = 1)
    a, t = row(0.2, 0.5, 1.0), row(0, 0.5, 0.5)
    assert float(alpha_loss(a, t)) == pytest.approx(0.2333333 + 0.35, abs=1e-7)
    assert float(alpha_loss(a, t, gradient_weight=0.0)) == pytest.approx(0.2333333, abs=1e-7)
    # pixel 2 invalid: L1 (0.2 + 0)/2 = 0.1, one pair (0, 1): 0.2
    assert float(alpha_loss(a, t, mask(1, 1, 0))) == pytest.approx(0.3, abs=1e-12)
    # the task decodes tanh: raw 0 -> alpha 0.5
    task = TASKS["alpha"]
    assert float(task.decode(torch.zeros(1))) == 0.5
    raw = torch.atanh(2 * a - 1 + torch.tensor([0, 0, -1e-9], dtype=torch.float64).reshape(1, 1, 1, 3))
    assert float(task.loss(raw, t)) == pytest.approx(0.2333333 + 0.35, abs=1e-6)


def test_alpha_metrics_by_hand():
    # SAD (0.2 + 0 + 0.5)/1000 = 7e-4; MSE (0.04 + 0 + 0.25)/3 = 0.0966667;
    # gradient magnitudes alpha 0.3, 0.5, 0 and target 0.5, 0, 0 -> (0.04 + 0.25 + 0)/1000 = 2.9e-4
    a, t = row(0.2, 0.5, 1.0), row(0, 0.5, 0.5)
    assert alpha_metrics(a, t) == pytest.approx({"sad": 7e-4, "mse": 0.0966667, "grad": 2.9e-4}, abs=1e-7)
    # pixel 1 invalid: SAD 0.7/1000, MSE (0.04 + 0.25)/2 = 0.145, gradient term 0.04/1000
    assert alpha_metrics(a, t, mask(1, 0, 1)) == pytest.approx({"sad": 7e-4, "mse": 0.145, "grad": 4e-5}, abs=1e-9)


# ------------------------------------------------------------------------------------------- segmentation

def test_binary_loss_and_metrics_by_hand():
    # logits 0 and ln 3 vs targets 1 and 0: -ln(1/2) = ln 2, -ln(1 - 3/4) = ln 4 -> mean 1.5 ln 2 = 1.0397208
    logits, target = row(0, LN3, 100), row(1, 0, 0)
    assert float(binary_loss(logits, target, mask(1, 1, 0))) == pytest.approx(1.5 * LN2, abs=1e-9)
    # probabilities 0.9, 0.8, 0.2, (0.6 invalid) vs 1, 0, 1: P = 1, 1, 0; G = 1, 0, 1 -> IoU 1/3, accuracy 1/3
    m = binary_metrics(row(0.9, 0.8, 0.2, 0.6), row(1, 0, 1, 0), mask(1, 1, 1, 0))
    assert m == pytest.approx({"iou": 1 / 3, "accuracy": 1 / 3})
    assert binary_metrics(row(0.1, 0.2), row(0, 0))["iou"] == 1.0  # both empty
    task = TASKS["binary"]
    assert task.make_target(torch.tensor([[[0, 3, 5]]])).flatten().tolist() == [0.0, 1.0, 1.0]


def test_semantic_loss_and_metrics_by_hand():
    # pixel 0: logits 0, 0, 0, class 1 -> ln 3; pixel 1: logits ln 2, 0, 0, class 0 -> -ln(2/4) = ln 2;
    # pixel 2: ignore index; pixel 3: masked out -> (ln 3 + ln 2)/2 = ln(6)/2 = 0.8958797
    logits = torch.tensor([[0, LN2, 5, 0], [0, 0, 0, 9], [0, 0, 0, 0]], dtype=torch.float64).reshape(1, 3, 1, 4)
    target = torch.tensor([1, 0, 255, 2]).reshape(1, 1, 1, 4)
    assert float(semantic_loss(logits, target, mask(1, 1, 1, 0))) == pytest.approx(math.log(6) / 2, abs=1e-9)
    task = TASKS["semantic"](out_channels=3)
    assert float(task.loss(logits, target, mask(1, 1, 1, 0))) == pytest.approx(math.log(6) / 2, abs=1e-9)
    # pred 0, 1, 1, 2 vs target 0, 1, 2, 2: IoU class 0: 1/1, class 1: 1/2, class 2: 1/2 -> mIoU 2/3;
    # class 3 absent from both, not counted; accuracy 3/4
    pred, gt = torch.tensor([0, 1, 1, 2]).reshape(1, 1, 1, 4), torch.tensor([0, 1, 2, 2]).reshape(1, 1, 1, 4)
    assert semantic_metrics(pred, gt, num_classes=4) == pytest.approx({"miou": 2 / 3, "accuracy": 0.75})
    # pixel 0 masked out: class 0 absent -> (1/2 + 1/2)/2, accuracy 2/3
    m = semantic_metrics(pred, gt, mask(0, 1, 1, 1), num_classes=4)
    assert m == pytest.approx({"miou": 0.5, "accuracy": 2 / 3})
    with pytest.raises(ValueError, match="class ids"):
        semantic_loss(logits, torch.tensor([1, 0, 7, 2]).reshape(1, 1, 1, 4))
    assert task.decode(logits).flatten().tolist() == [0, 0, 0, 1]  # argmax; ties go to the first class


# ------------------------------------------------------------------------------------------- albedo

def test_albedo_loss_and_metrics_by_hand():
    # 2 pixels x 3 channels: |diffs| pixel 0: 0.1, 0.2, 0.3 (mean 0.2), pixel 1: 0.4, 0, 0 (0.4 / 3); pixel 2 invalid
    pred = torch.tensor([[0.1, 0.4, 9], [0.2, 0.5, 9], [0.3, 0.5, 9]], dtype=torch.float64).reshape(1, 3, 1, 3)
    target = torch.tensor([[0.0, 0.0, 0], [0.0, 0.5, 0], [0.0, 0.5, 0]], dtype=torch.float64).reshape(1, 3, 1, 3)
    valid = mask(1, 1, 0)
    assert float(l1_loss(pred, target, valid)) == pytest.approx((0.6 + 0.4) / 6, abs=1e-12)
    # MSE: (0.01 + 0.04 + 0.09 + 0.16) / 6 = 0.05; RMSE sqrt(0.05); PSNR -10 log10(0.05) = 13.0103 dB
    m = albedo_metrics(pred, target, valid)
    assert m == pytest.approx({"l1": 1 / 6, "rmse": math.sqrt(0.05), "psnr": 13.0103}, abs=1e-4)
    task = TASKS["albedo"]
    assert float(task.decode(torch.zeros(1))) == 0.5  # sigmoid
    linear = task(output="linear")
    assert float(linear.loss(pred, target, valid)) == pytest.approx(1 / 6, abs=1e-12)
    with pytest.raises(ValueError):
        task(output="relu")


# ------------------------------------------------------------------------------------------- tasks

def test_task_registry_and_fields():
    want = {"depth": (1, "depth"), "normals": (3, "camnormal"), "alpha": (1, "alpha"), "binary": (1, "segment"),
            "semantic": (12, "semantic"), "albedo": (3, "albedo")}
    for name, (k, field) in want.items():
        task = TASKS[name]
        assert (task.name, task.out_channels, task.target_field) == (name, k, field)
        assert task.primary_metric and isinstance(task.lower_is_better, bool)
    assert not TASKS["semantic"].lower_is_better and TASKS["depth"].lower_is_better
    assert get_task("semantic", out_channels=5).out_channels == 5 and TASKS["semantic"].out_channels == 12
    with pytest.raises(ValueError, match="unknown task"):
        get_task("flow")


def test_mean_baselines():
    # depth: valid pixels 1, 3 (0 = no surface) and 2 -> mean 2
    assert float(TASKS["depth"].mean_baseline([row(1, 3, 0), row(2, 0, 0)])) == 2.0
    # normals: mean of x and y, renormalised
    nb = TASKS["normals"].mean_baseline(normals((1, 0, 0), (0, 1, 0), (0, 0, 0)))
    torch.testing.assert_close(nb.flatten(), torch.tensor([2 ** -0.5, 2 ** -0.5, 0]))
    # binary: foreground share 1/4; semantic: the most frequent class
    assert float(TASKS["binary"].mean_baseline(row(0, 1, 0, 0))) == 0.25
    sem = TASKS["semantic"].mean_baseline([torch.tensor([2, 2, 5, 255]).reshape(1, 1, 1, 4)])
    assert sem.shape == (1, 1, 1, 1) and int(sem) == 2
    # the baseline scores through metrics once expanded
    target = row(1, 3, 0)
    m = TASKS["depth"].metrics(TASKS["depth"].mean_baseline(target).expand_as(target).double(), target)
    assert m["abs_rel"] == pytest.approx((1 + 1 / 3) / 2)


def test_empty_masks_give_zero_loss_with_gradient():
    pred = row(1.0, 2.0).requires_grad_(True)
    loss = silog_loss(pred, row(0, 0))
    loss.backward()
    assert float(loss.detach()) == 0 and pred.grad is not None
    assert float(binary_loss(pred, row(1, 0), mask(0, 0)).detach()) == 0


def test_losses_reject_bad_shapes():
    with pytest.raises(ValueError, match="share"):
        l1_loss(row(1, 2), row(1, 2, 3))
    with pytest.raises(ValueError, match="valid"):
        l1_loss(row(1, 2), row(1, 2), torch.ones(1, 1, 1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="boolean"):
        l1_loss(row(1, 2), row(1, 2), torch.ones(1, 1, 1, 2))
    with pytest.raises(ValueError, match="3 channels"):
        normal_loss(row(1, 2), row(1, 2))


def test_losses_and_metrics_take_bfloat16_predictions():
    torch.manual_seed(0)
    target = torch.rand(2, 1, 4, 4) + 0.5
    for name in ("depth", "alpha", "binary"):
        task = TASKS[name]
        t = (target > 1).float() if name == "binary" else (target - 0.5 if name == "alpha" else target)
        raw = torch.randn(2, 1, 4, 4, dtype=torch.bfloat16, requires_grad=True)
        loss = task.loss(raw, t)
        assert loss.dtype == torch.float32 and torch.isfinite(loss)
        loss.backward()
        assert raw.grad is not None and raw.grad.dtype == torch.bfloat16
        assert all(math.isfinite(v) for v in task.metrics(task.decode(raw.detach()), t).values())
    task = TASKS["normals"]
    n = torch.nn.functional.normalize(torch.randn(2, 3, 4, 4), dim=1)
    loss = task.loss(torch.randn(2, 3, 4, 4, dtype=torch.bfloat16), n)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
