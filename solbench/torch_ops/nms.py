"""Non-maximum suppression of boxes [N, 4] (x1, y1, x2, y2) with scores [N]."""

from __future__ import annotations

import torch

CANVAS = 1024.0          # boxes lie in a CANVAS x CANVAS image
BOXES_PER_OBJECT = 50    # detections cluster around objects, as a detector's raw output does
JITTER = 0.08            # of the object size: the spread of a cluster's boxes


def detection_boxes(shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator,
                    device: str) -> torch.Tensor:
    """Valid boxes (x1 < x2, y1 < y2) in clusters of about BOXES_PER_OBJECT around random
    objects, so many pairs overlap with IoU near any threshold."""
    n = shape[0]
    objects = max(1, n // BOXES_PER_OBJECT)

    def rand(*size: int) -> torch.Tensor:
        return torch.rand(size, generator=generator, device=device, dtype=torch.float64)

    def randn(*size: int) -> torch.Tensor:
        return torch.randn(size, generator=generator, device=device, dtype=torch.float64)

    centre = rand(objects, 2) * CANVAS
    size = 16.0 + rand(objects, 2) * 240.0
    which = torch.randint(0, objects, (n,), generator=generator, device=device)
    c = centre[which] + randn(n, 2) * size[which] * JITTER
    wh = size[which] * (1.0 + JITTER * randn(n, 2)).clamp(min=0.25)
    return torch.cat((c - wh / 2, c + wh / 2), dim=1).to(dtype)


def scores_uniform(shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator,
                   device: str) -> torch.Tensor:
    """Scores in (0, 1), no two equal, so the order of boxes is unambiguous."""
    n = shape[0]
    perm = torch.randperm(n, generator=generator, device=device).to(torch.float64)
    return ((perm + 0.5) / n).to(dtype)


def torchvision_nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    import torchvision

    return torchvision.ops.nms(boxes, scores, iou_threshold)


def _iou(box: torch.Tensor, others: torch.Tensor) -> torch.Tensor:
    """torchvision's IoU, operation for operation: intersection / (area_a + area_b - intersection)."""
    left = torch.maximum(box[0], others[:, 0])
    right = torch.minimum(box[2], others[:, 2])
    top = torch.maximum(box[1], others[:, 1])
    bottom = torch.minimum(box[3], others[:, 3])
    inter = (right - left).clamp(min=0) * (bottom - top).clamp(min=0)
    area_a = (box[2] - box[0]) * (box[3] - box[1])
    area_b = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    return inter / (area_a + area_b - inter)


def nms_loop(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """The plain algorithm on the host: best box first; keep it, drop every later box that overlaps
    it by IoU > threshold; repeat with the next box still standing."""
    b = boxes.detach().cpu()
    order = torch.sort(scores.detach().cpu(), descending=True, stable=True).indices
    b = b[order]
    alive = torch.ones(len(b), dtype=torch.bool)
    keep = []
    for i in range(len(b)):
        if not alive[i]:
            continue
        keep.append(i)
        alive[i + 1:] &= ~(_iou(b[i], b[i + 1:]) > iou_threshold)
    return order[torch.tensor(keep, dtype=torch.int64)].to(boxes.device)


def nms_reference(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """torchvision.ops.nms where torchvision is installed (the result to match), else nms_loop."""
    try:
        import torchvision  # noqa: F401
    except ImportError:
        return nms_loop(boxes, scores, iou_threshold)
    return torchvision_nms(boxes, scores, iou_threshold)
