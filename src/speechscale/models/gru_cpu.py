"""One GRU direction on the CPU with a hand-written backward through time.

PyTorch's CPU GRU records every time step's ops for autograd, so its backward is a chain of small ops and,
worse, accumulates each weight gradient one time step at a time: for a 800-unit layer that is a 800 x 2400
outer product written per step and direction. Here the forward runs without autograd and keeps the gates;
the backward walks the time steps once for the recurrent gradient only (one (B, 3H) x (3H, H) product per
step) and forms the weight, bias and input gradients afterwards as single large matrix products over all
steps. Same maths as `torch.nn.GRU` (gate order r, z, n; n = tanh(W_in x + b_in + r * (W_hn h + b_hn))).
"""
from __future__ import annotations

import torch


class GRUDirection(torch.autograd.Function):
    """x (B, T, I), w_ih (3H, I), w_hh (3H, H), b_ih (3H,), b_hh (3H,) -> out (B, T, H), from h0 = 0."""

    @staticmethod
    def forward(ctx, x, w_ih, w_hh, b_ih, b_hh):  # type: ignore[override]
        b, t, _ = x.shape
        hidden = w_hh.shape[1]
        gi = torch.addmm(b_ih, x.reshape(b * t, -1), w_ih.t()).view(b, t, 3, hidden)  # all input products at once
        gi = gi.permute(1, 2, 0, 3)  # (T, 3, B, H): each step's gates are contiguous slices
        out = x.new_empty(t + 1, b, hidden)  # out[0] = h0 = 0; out[s + 1] = h after step s
        out[0].zero_()
        r_all = x.new_empty(t, b, hidden)
        z_all = x.new_empty(t, b, hidden)
        n_all = x.new_empty(t, b, hidden)
        ghn_all = x.new_empty(t, b, hidden)
        w_hh_t = w_hh.t()
        for s in range(t):
            h = out[s]
            gh = torch.addmm(b_hh, h, w_hh_t).view(b, 3, hidden)  # (B, 3, H)
            r = torch.sigmoid(gi[s, 0] + gh[:, 0], out=r_all[s])
            z = torch.sigmoid(gi[s, 1] + gh[:, 1], out=z_all[s])
            ghn_all[s].copy_(gh[:, 2])
            n = torch.tanh(torch.addcmul(gi[s, 2], r, gh[:, 2]), out=n_all[s])
            torch.addcmul(n, z, h - n, out=out[s + 1])  # h' = n + z (h - n)
        ctx.save_for_backward(x, w_ih, w_hh, out, r_all, z_all, n_all, ghn_all)
        return out[1:].transpose(0, 1)  # (B, T, H)

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        x, w_ih, w_hh, out, r_all, z_all, n_all, ghn_all = ctx.saved_tensors
        b, t, _ = x.shape
        hidden = w_hh.shape[1]
        g_out = grad_out.transpose(0, 1)  # (T, B, H)
        dgi = x.new_empty(t, b, 3, hidden)  # input-side gate gradients (r, z, n pre-activations)
        dgh = x.new_empty(t, b, 3, hidden)  # hidden-side: r and z equal dgi's, n is r * dn_pre
        dh = x.new_zeros(b, hidden)
        for s in range(t - 1, -1, -1):
            dh = dh + g_out[s]
            r, z, n, h_prev = r_all[s], z_all[s], n_all[s], out[s]
            dn_pre = dh * (1 - z) * (1 - n * n)
            dz_pre = dh * (h_prev - n) * z * (1 - z)
            dr_pre = dn_pre * ghn_all[s] * r * (1 - r)
            dgi[s, :, 0] = dr_pre
            dgi[s, :, 1] = dz_pre
            dgi[s, :, 2] = dn_pre
            dgh[s, :, 0] = dr_pre
            dgh[s, :, 1] = dz_pre
            torch.mul(dn_pre, r, out=dgh[s, :, 2])
            if s > 0:  # h0 is a constant zero state: no gradient flows into it
                dh = torch.addmm(dh * z, dgh[s].view(b, 3 * hidden), w_hh)  # (B, H)
        dgi2 = dgi.view(t * b, 3 * hidden)
        dgh2 = dgh.view(t * b, 3 * hidden)
        x_tb = x.transpose(0, 1).reshape(t * b, -1)  # (T*B, I), the order of dgi's rows
        grad_x = grad_w_ih = grad_w_hh = grad_b_ih = grad_b_hh = None
        if ctx.needs_input_grad[0]:
            grad_x = (dgi2 @ w_ih).view(t, b, -1).transpose(0, 1)  # (B, T, I)
        if ctx.needs_input_grad[1]:
            grad_w_ih = dgi2.t() @ x_tb
        if ctx.needs_input_grad[2]:
            grad_w_hh = dgh2.t() @ out[:-1].reshape(t * b, hidden)
        if ctx.needs_input_grad[3]:
            grad_b_ih = dgi2.sum(0)
        if ctx.needs_input_grad[4]:
            grad_b_hh = dgh2.sum(0)
        return grad_x, grad_w_ih, grad_w_hh, grad_b_ih, grad_b_hh
