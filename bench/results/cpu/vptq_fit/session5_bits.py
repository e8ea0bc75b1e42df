import math, sys, json
shapes={"q_proj":(576,576),"k_proj":(192,576),"v_proj":(192,576),"o_proj":(576,576),"gate_proj":(1536,576),"up_proj":(1536,576),"down_proj":(576,1536)}
def words(g,b): return (g*b+31)//32
def bits(res, main=4096, default_res=128, L=30):
    tot=0; W=0
    for t,(n,k) in shapes.items():
        r=res.get(t,default_res); g=n//8
        per=k*(words(g,12)+(words(g,math.ceil(math.log2(r))) if r else 0))*32 + n*16
        tot+=L*per + main*8*16 + r*8*16
        W+=L*n*k
    return tot/W
for a in sys.argv[1:]: print(f"{bits(json.loads(a)):.4f}", a)
