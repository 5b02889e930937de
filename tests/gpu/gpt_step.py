"""Time one training step of a 1.3B GPT (h 2048, 24 layers, seq 4096, micro-batch 2) in plain PyTorch
on one GPU (not collected by pytest): python3 tests/gpu/gpt_step.py

Checks the sustained fraction on a single GPU. The time model predicts, for the same model on
tests/fixtures/h200.yaml (tp=pp=dp=1, mbs=2), a forward+backward of 170 ms with the calibrated
Hopper sustained fraction 0.73 and 129 ms with 1.0 (PyTorch eager differs from Megatron/TE in
kernel fusion; compare the forward+backward time, the optimizer here keeps bf16 states).
Not yet run (the device was busy); see the time-model report.
"""
import torch as T
import time
import json
import torch.nn as nn
import torch.nn.functional as F
h,L,H,S,B,V=2048,24,16,4096,2,50304
class Blk(nn.Module):
 def __init__(s):
  super().__init__();s.n1=nn.LayerNorm(h);s.qkv=nn.Linear(h,3*h);s.o=nn.Linear(h,h);s.n2=nn.LayerNorm(h);s.f1=nn.Linear(h,4*h);s.f2=nn.Linear(4*h,h)
 def forward(s,x):
  b,t,_=x.shape;q,k,v=s.qkv(s.n1(x)).view(b,t,3,H,h//H).permute(2,0,3,1,4)
  a=F.scaled_dot_product_attention(q,k,v,is_causal=True).transpose(1,2).reshape(b,t,h)
  x=x+s.o(a);return x+s.f2(F.gelu(s.f1(s.n2(x)),approximate="tanh"))
class M(nn.Module):
 def __init__(s):
  super().__init__();s.e=nn.Embedding(V,h);s.p=nn.Embedding(S,h);s.b=nn.ModuleList(Blk() for _ in range(L));s.n=nn.LayerNorm(h)
 def forward(s,i):
  x=s.e(i)+s.p.weight[None]
  for b in s.b:x=b(x)
  return F.cross_entropy((s.n(x)@s.e.weight.t()).float().view(-1,V),i.view(-1))
R={}
for mode in ["bf16params"]:
 m=M().cuda().to(T.bfloat16);o=T.optim.AdamW(m.parameters(),lr=1e-4,fused=True)
 i=T.randint(0,V,(B,S),device="cuda")
 def step(opt=True):
  l=m(i);l.backward()
  if opt:o.step();o.zero_grad(set_to_none=False)
 for _ in range(3):step()
 for opt in (False,True):
  T.cuda.synchronize();t=time.perf_counter()
  for _ in range(10):step(opt)
  T.cuda.synchronize();R[f"{mode}_opt{opt}"]=(time.perf_counter()-t)/10
R["params"]=sum(p.numel() for p in m.parameters())
print(json.dumps(R))
