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
        x_tb = x.transpose(0, 1).reshape(t * b, -1)  # (T*B, I): time-major rows
        gi = torch.addmm(b_ih, x_tb, w_ih.t()).view(t, b, 3 * hidden)  # every step's input products at once
        w_hh_t = w_hh.t().contiguous()  # (H, 3H): 20 % faster per step than the transposed view on 2 cores
        out = x.new_empty(t + 1, b, hidden)  # out[0] = h0 = 0; out[s + 1] = h after step s
        out[0].zero_()
        gh = x.new_empty(t, b, 3 * hidden)  # hidden products; their n part is needed again in backward
        rz = x.new_empty(t, b, 2 * hidden)  # r and z gates
        n_all = x.new_empty(t, b, hidden)
        h2 = 2 * hidden
        for s in range(t):
            h = out[s]
            torch.addmm(b_hh, h, w_hh_t, out=gh[s])
            gates = torch.sigmoid(torch.add(gi[s, :, :h2], gh[s, :, :h2], out=rz[s]), out=rz[s])
            n = torch.tanh(torch.addcmul(gi[s, :, h2:], gates[:, :hidden], gh[s, :, h2:], out=n_all[s]), out=n_all[s])
            torch.addcmul(n, gates[:, hidden:], h - n, out=out[s + 1])  # h' = n + z (h - n)
        ctx.save_for_backward(x_tb, w_ih, w_hh, out, gh, rz, n_all)
        return out[1:].transpose(0, 1)  # (B, T, H)

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        x_tb, w_ih, w_hh, out, gh, rz, n_all = ctx.saved_tensors
        t, b, hidden = n_all.shape
        h2 = 2 * hidden
        g_out = grad_out.transpose(0, 1)  # (T, B, H)
        dgi = x_tb.new_empty(t, b, 3 * hidden)  # input-side gate gradients (r, z, n pre-activations)
        dgh = x_tb.new_empty(t, b, 3 * hidden)  # hidden-side: r and z equal dgi's, n is r * dn_pre
        drz = rz * (1 - rz)  # sigmoid's derivative, all steps at once
        dn_all = 1 - n_all * n_all  # tanh's
        dh = torch.zeros_like(out[0])
        for s in range(t - 1, -1, -1):
            dh = dh + g_out[s]
            r, z = rz[s, :, :hidden], rz[s, :, hidden:]
            n = n_all[s]
            dn_pre = torch.mul(dh - dh * z, dn_all[s], out=dgi[s, :, h2:])  # dh (1 - z) tanh'
            torch.mul(dn_pre, gh[s, :, h2:], out=dgi[s, :, :hidden])  # dr
            torch.mul(dh, out[s] - n, out=dgi[s, :, hidden:h2])  # dz
            torch.mul(dgi[s, :, :h2], drz[s], out=dgi[s, :, :h2])  # through the sigmoids
            dgh[s, :, :h2] = dgi[s, :, :h2]
            torch.mul(dn_pre, r, out=dgh[s, :, h2:])
            if s > 0:  # h0 is a constant zero state: no gradient flows into it
                dh = torch.addmm(dh * z, dgh[s], w_hh)  # (B, H)
        dgi2 = dgi.view(t * b, 3 * hidden)
        dgh2 = dgh.view(t * b, 3 * hidden)
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
